"""The store of laid-out chunks (`KVCache.panels`, kernels/attention_pairs.h `Panels`) that bf16a's attention keeps,
and bf16 attention on AMX-BF16 tiles: a full chunk of context slots is laid out (key and value panels, or the tiles'
packed keys and values) once and read from the store by every later item and pass. Reading the store must give the
very bits that laying the chunk out afresh gives, and a chunk whose slots change (truncate, compact, a failed pass)
must never be read from the store again."""
import pytest
import torch

from verispec import kernels
from verispec.model import ops
from verispec.model.kv_cache import KVCache
from verispec.model.llama import Llama, LlamaConfig
from verispec.tree import build_tree


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def no_store(monkeypatch):
    monkeypatch.setattr(ops.Rows, "stores", lambda self, pairs: ())


def needs_tiles(kind: str) -> None:
    """The tiles' store exists only where bf16 attention runs on AMX-BF16 tiles: elsewhere say so and skip."""
    if kind == "tiles" and not kernels.bf16_on_amx():
        pytest.skip("bf16 attention runs on AMX-BF16 tiles only on a CPU with AMX-BF16 (the float product here: "
                    f"{kernels.load().fp_isa()}); its store is checked there")


@pytest.mark.parametrize("kind", ["pairs", "tiles"])
def test_stored_chunks_give_the_bits_of_chunks_laid_out_afresh(kind):
    """Three sequences in one call: a 70-row chain after 300 slots, tree rows with ancestors after 260 slots, a
    decoding row after 520. The first call lays out the full chunks of context slots into the store, a second one
    reads them: both equal attention without a store, bit for bit. A store the caller did not clear after changing
    a chunk's slots is read as it is (so the store is really read), and clearing it lays the chunk out again."""
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    needs_tiles(kind)
    g = torch.Generator().manual_seed(5)
    heads, kv_heads, d, cap, C = 6, 2, 64, 600, ops.CHUNK
    caches = [KVCache(1, 1, kv_heads, cap, d, torch.bfloat16) for _ in range(3)]
    for c in caches:
        c.k.copy_(torch.randn(c.k.shape, generator=g) * 2)
        c.v.copy_(torch.randn(c.v.shape, generator=g))
    seq, ctx, extra = [], [], []
    for r in range(70):
        seq.append(0), ctx.append(301 + r), extra.append([])
    for r in range(9):
        anc = sorted(torch.randperm(9, generator=g)[:r % 5].tolist())
        seq.append(1), ctx.append(260), extra.append([260 + a for a in anc] + [260 + 9 + r])
    seq.append(2), ctx.append(521), extra.append([])
    width = max(len(e) for e in extra)
    n_extra = torch.tensor([len(e) for e in extra])
    extra = torch.tensor([e + [0] * (width - len(e)) for e in extra], dtype=torch.long)
    seq, ctx = torch.tensor(seq), torch.tensor(ctx)
    q = torch.randn(len(seq), heads, d, generator=g)
    ks, vs = [c.k[0, 0] for c in caches], [c.v[0, 0] for c in caches]
    args = (q, ks, vs, seq, ctx, extra, n_extra, d ** -0.5, C, kind == "pairs")
    stores = [c.panels(C, kind) for c in caches]
    pan, built = [p[0, 0] for p, _ in stores], [b[0, 0] for _, b in stores]

    want = lib.attention(*args)
    first = lib.attention(*args, pan, built)
    # full chunks of context slots: sequence 0's rows see up to 370 slots, 1's 260, 2's 521
    assert [b.tolist()[:cap // C] for b in built] == [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    again = lib.attention(*args, pan, built)
    assert torch.equal(bits(first), bits(want)) and torch.equal(bits(again), bits(want))

    caches[2].v[0, 0, :, 300] += 1.0                 # chunk 2 of sequence 2 changes, its store not cleared
    fresh = lib.attention(*args)
    assert not torch.equal(bits(lib.attention(*args, pan, built)), bits(fresh))
    caches[2].stale(300)                             # (what truncate, compact and every pass's plan do)
    assert built[2].tolist() == [1, 1, 0, 0]
    assert torch.equal(bits(lib.attention(*args, pan, built)), bits(fresh))
    assert built[2].tolist() == [1, 1, 1, 1]


def test_the_cache_clears_the_chunks_whose_slots_change():
    cache = KVCache(2, 1, 2, 700, 32, torch.bfloat16)
    _, built = cache.panels(128)
    built.fill_(1)
    cache.length = 650
    cache.truncate(600)                              # slots 600.. may be written again: chunk 4 (512-639) on
    assert built[0, 0].tolist() == [1, 1, 1, 1, 0] and built[1, 0].tolist() == [1, 1, 1, 1, 0]
    cache.compact(300, torch.tensor([0, 2]))         # slots 300.. move: chunk 2 on
    assert built[0, 0].tolist() == [1, 1, 0, 0, 0]
    built.fill_(1)
    ops.Rows.plan([(cache, 0, 3, None)])             # a pass writes slots from the length on (a failed pass may
    assert built[1, 0].tolist() == [1, 1, 0, 0, 0]   # have left stale ones there)


def tiny_bf16(activations: bool) -> Llama:
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
                      max_position=1024, vocab_size=500)
    model = Llama(cfg)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.05)
    model = model.to(torch.bfloat16).eval()
    if activations:
        ops.bf16_activations(model)
    return model


@pytest.fixture(scope="module")
def bf16a_model():
    return tiny_bf16(True)


def decode(model, g: torch.Generator) -> torch.Tensor:
    """A 300-token prefill, then chains and token trees across chunk boundaries, each pass partly rejected
    (truncate, compact), as speculative decoding leaves the cache: every pass's hidden states, in order."""
    cache, outs = model.new_cache(800), []
    with torch.inference_mode():
        outs.append(model(torch.randint(0, 500, (1, 300), generator=g), torch.arange(300)[None], cache)[0])
        for step in range(40):
            start = cache.length
            if step % 3 == 2:                          # a tree of 6 nodes under the newest token
                tree = build_tree([(0,), (1,), (0, 0), (0, 1), (0, 0, 0)])
                n = tree.size + 1
                mask = torch.cat([torch.ones(n, start, dtype=torch.bool), tree.ancestry], 1)[None]
                positions = (start + torch.tensor(tree.depths))[None]
                outs.append(model(torch.randint(0, 500, (1, n), generator=g), positions, cache, mask)[0])
                cache.compact(start, torch.tensor([0, 1, 3]))
            else:
                n = 1 + step % 7
                outs.append(model(torch.randint(0, 500, (1, n), generator=g), torch.arange(start, start + n)[None],
                                  cache)[0])
                cache.truncate(start + 1 + (step * 5) % n)
    return torch.cat(outs), cache


@pytest.mark.parametrize("kind", ["pairs", "tiles", "tiles, 4-bit layers"])
def test_a_model_decodes_the_same_bits_with_the_store(bf16a_model, kind, monkeypatch):
    """The store on (the kernels' default for bf16a, and for bf16 on AMX tiles, float layers or quantized ones: a
    4-bit draft's or head's over a bf16 cache) and off: the same hidden states for every pass, chains and trees,
    over a context that crosses chunk boundaries as it grows and is cut back; and with the store on, the cache's
    full chunks end up laid out in every layer."""
    from verispec.model import requant
    needs_tiles(kind[:5])
    model = bf16a_model if kind == "pairs" else tiny_bf16(False)
    if kind.endswith("layers"):
        requant.to_q4(model)
    on, cache = decode(model, torch.Generator().manual_seed(1))
    _, built = cache.panels(ops.CHUNK, kind[:5])
    assert cache.length > 3 * ops.CHUNK and built[:, 0, :cache.length // ops.CHUNK].all()
    no_store(monkeypatch)
    off, _ = decode(model, torch.Generator().manual_seed(1))
    assert torch.equal(bits(on.float()), bits(off.float()))


def test_the_server_budgets_the_store(bf16a_model, monkeypatch):
    """A bf16a model's caches hold their laid-out chunks beside the keys and values, and a bf16 model's where its
    attention runs on AMX tiles: the server's KV budget counts both (`model.rows.kv_bytes_per_token`)."""
    from verispec.model.rows import kv_bytes_per_token
    c = bf16a_model.cfg
    keys_and_values = 2 * c.num_layers * c.num_kv_heads * c.head_dim * 2
    assert kv_bytes_per_token(bf16a_model) == 2 * keys_and_values
    bf16 = tiny_bf16(False)
    for amx in (True, False):                                  # as on a CPU with AMX-BF16, and without
        monkeypatch.setattr(kernels, "bf16_on_amx", lambda amx=amx: amx)
        assert kv_bytes_per_token(bf16) == (2 if amx else 1) * keys_and_values
