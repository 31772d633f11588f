"""Row invariance, by property over random shapes: every row of a pass (a chain, a token tree, a packed ragged
batch, 1 to 64 rows, any cache length) equals the slow reference that computes each row alone
(`ops.one_row_at_a_time`), bit for bit, in bf16 and fp32; and plain decoding equals a verified chain or tree.

A machine where the kernels cannot run fails here with the reason (never a silent skip): `verispec doctor`.
"""
import pytest
import torch

from verispec import kernels
from verispec.model import fused, ops
from verispec.model.llama import Llama, LlamaConfig

# the CPU flags (from /proc/cpuinfo, not the kernels' own check) under which bf16 products and attention over bf16
# caches run on AMX tiles
AMX_BF16 = {"amx_bf16", "amx_tile", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"}

CFG = LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_layers=2, num_heads=4,
                  num_kv_heads=2, max_position=1024)


def test_the_kernels_run_on_this_machine():
    assert kernels.status() is None, f"row-invariant kernels unavailable: {kernels.status()}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_the_float_product_gives_the_same_bits_with_every_instruction_set(dtype):
    """Where the CPU has AVX-512 the float product runs 16-lane FMAs in tiles of up to 12 rows; forced to AVX2 it
    runs 8-lane ones in tiles of up to 6. Each output is the same FMA chain either way, so every row count gives
    the AVX2 bits and each row alone's bits. On a CPU without AVX-512 both runs are AVX2. (bf16 on AMX tiles has
    bits of its own: the next test.)"""
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    g = torch.Generator().manual_seed(3)
    try:
        for n, k in ((200, 96), (49, 40), (16, 8)):
            w = torch.randn(n, k, generator=g).to(dtype)
            bias = torch.randn(n, generator=g)
            panels = ops._panels(w, amx=False)
            for m in (1, 2, 5, 12, 13, 25, 97, 130):
                x = torch.randn(m, k, generator=g)
                lib.set_fp_isa("avx2")
                narrow = lib.linear(x, panels, n, bias)
                assert lib.set_fp_isa("avx512") in ("avx512", "avx2")
                wide = lib.linear(x, panels, n, bias)
                alone = torch.cat([lib.linear(x[i:i + 1], panels, n, bias) for i in range(m)])
                assert torch.equal(wide.view(torch.int32), narrow.view(torch.int32)), (lib.fp_isa(), n, k, m)
                assert torch.equal(wide.view(torch.int32), alone.view(torch.int32)), (lib.fp_isa(), n, k, m)
    finally:
        lib.set_fp_isa("best")
    with pytest.raises(RuntimeError, match="'avx2', 'avx512' or 'best'"):
        lib.set_fp_isa("amx")


def test_the_bf16_product_on_amx_tiles_gives_each_row_its_own_bits():
    """Where the CPU has AMX-BF16 (and AVX-512), the best bf16 product runs on AMX tiles, for every row count;
    elsewhere it never does (the CPU's flags decide, so a machine that breaks this fails here by name). On AMX:
    1 to 300 rows, K of one to 48 tile steps, every row equals that row alone, bit for bit, and stays within
    1e-5 of the float64 product (each activation carries about 16 of its 24 bits into the tiles)."""
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    flags = kernels.cpu_flags()
    has = AMX_BF16 <= flags
    assert lib.set_fp_isa("best") == ("amx" if has else "avx512" if "avx512f" in flags else "avx2"), sorted(flags)
    if not has:
        return
    g = torch.Generator().manual_seed(5)
    for n, k in ((200, 96), (49, 32), (33, 1536)):
        w = torch.randn(n, k, generator=g).to(torch.bfloat16)
        bias = torch.randn(n, generator=g)
        panels = ops._panels(w)
        assert panels.shape == ((n + 15) // 16, k // 2, 32)
        for m in (1, 2, 5, 16, 17, 33, 97, 130, 300):
            x = torch.randn(m, k, generator=g)
            y = lib.linear(x, panels, n, bias)
            alone = torch.cat([lib.linear(x[i:i + 1], panels, n, bias) for i in range(m)])
            assert torch.equal(y.view(torch.int32), alone.view(torch.int32)), (n, k, m)
            exact = x.double() @ w.double().T + bias.double()
            assert ((y.double() - exact).abs().max() / exact.abs().max()).item() < 1e-5, (n, k, m)
    x = torch.randn(3, 40, generator=g)          # K not a multiple of 32: the AVX-512 product, the portable bits
    w = torch.randn(16, 40, generator=g).to(torch.bfloat16)
    best = lib.linear(x, ops._panels(w), 16, None)
    lib.set_fp_isa("avx512")
    try:
        assert torch.equal(best.view(torch.int32), lib.linear(x, ops._panels(w), 16, None).view(torch.int32))
        with pytest.raises(RuntimeError, match="AMX panels need"):  # AMX-packed weights with AMX off: an error
            lib.linear(torch.randn(2, 64), ops._panels(torch.randn(16, 64).bfloat16(), amx=True), 16, None)
    finally:
        lib.set_fp_isa("best")


@pytest.mark.parametrize("dtype, pairs", [(torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)])
@pytest.mark.parametrize("heads, kv_heads, d", [(9, 3, 64), (12, 2, 128), (14, 2, 64), (4, 4, 32), (6, 2, 48),
                                               (3, 1, 24)])
def test_attention_gives_the_same_bits_with_every_instruction_set(dtype, pairs, heads, kv_heads, d):
    """On AVX-512 attention runs its scores, exponentials and weighted values 16 lanes wide, a block of query heads
    sharing each key and value load; forced to AVX2 it runs the 8-lane sequences that define the bits. Rows of
    three sequences (a prefill-like chain, a tree with extra slots, one decoding row) over contexts that end inside,
    on and past the chunk boundaries, head sizes 24 to 128 (24: no 16-lane value path; 48: no 16-word key
    transpose) and 1 to 7 query heads per key head: every output equals the AVX2 one bit for bit. On a CPU without
    AVX-512 both runs are AVX2. Where the bf16 product runs on AMX tiles, bf16 caches with head sizes that are
    multiples of 32 take the tiles too (`test_attention_on_amx_tiles_gives_each_row_its_own_bits`), so there the
    AVX-512 run is forced.
    pairs (`--dtype bf16a`, head sizes a multiple of 16): the bf16 pair products of kernels/attention_pairs.h, with
    vdpbf16ps where the CPU has it and agrees, else their AVX2 FMA steps, on AMX machines too: the same bits, each
    row alone as in the pass, and within 1e-2 of float64 attention of the bf16-rounded queries (the weights carry 8
    of their 24 bits into the values' product)."""
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    g = torch.Generator().manual_seed(11)
    cap = 300
    ks = [(torch.randn(kv_heads, cap, d, generator=g) * 2).to(dtype) for _ in range(3)]
    vs = [torch.randn(kv_heads, cap, d, generator=g).to(dtype) for _ in range(3)]
    seq, ctx, extra, n_extra = [], [], [], []
    for r in range(70):                          # sequence 0: a chain of 70 rows after 100 context slots
        seq.append(0), ctx.append(101 + r), extra.append([]), n_extra.append(0)
    for r in range(9):                           # sequence 1: 9 tree rows after 128 slots, each with its ancestors
        anc = sorted(torch.randperm(9, generator=g)[:r % 5].tolist())
        seq.append(1), ctx.append(128), extra.append([128 + a for a in anc] + [128 + 9 + r]), n_extra.append(len(anc) + 1)
    seq.append(2), ctx.append(257), extra.append([]), n_extra.append(0)
    width = max(len(e) for e in extra)
    extra = torch.tensor([e + [0] * (width - len(e)) for e in extra], dtype=torch.long)
    q = torch.randn(len(seq), heads, d, generator=g)
    args = (ks, vs, torch.tensor(seq), torch.tensor(ctx), extra, torch.tensor(n_extra), d ** -0.5, ops.CHUNK, pairs)
    tiles = lib.fp_isa() == "amx" and dtype == torch.bfloat16 and d % 32 == 0 and not pairs
    try:
        lib.set_fp_isa("avx2")
        narrow = lib.attention(q, *args)
        lib.set_fp_isa("avx512" if tiles else "best")
        wide = lib.attention(q, *args)
        alone = torch.cat([lib.attention(q[i:i + 1], ks, vs, args[2][i:i + 1], args[3][i:i + 1], extra[i:i + 1],
                                         args[5][i:i + 1], *args[6:]) for i in range(len(seq))])
    finally:
        lib.set_fp_isa("best")
    best = lib.fp_isa()
    assert torch.equal(wide.view(torch.int32), narrow.view(torch.int32)), (best, heads, kv_heads, d)
    assert torch.equal(wide.view(torch.int32), alone.view(torch.int32)), (best, heads, kv_heads, d)
    if not tiles:
        assert torch.equal(lib.attention(q, *args).view(torch.int32), wide.view(torch.int32)), (best, heads, d)
    if pairs and d % 16 == 0:                    # the pair products ran: other bits than the fp32 products'
        assert not torch.equal(wide, lib.attention(q, *args[:-1], False)), (heads, d)
        error = (wide.double() - reference_attention(q.bfloat16().float(), *args[:6])).abs().max().item()
        assert error < 1e-2, (heads, d, error)


@pytest.mark.parametrize("dtype, pairs", [(torch.float32, False), (torch.bfloat16, False), (torch.bfloat16, True)])
@pytest.mark.parametrize("heads, kv_heads, d", [(9, 3, 64), (14, 2, 64), (20, 1, 32)])
def test_a_tree_row_equals_its_keys_laid_out_as_plain_context(dtype, pairs, heads, kv_heads, d):
    """A tree row attends over the context, then its ancestors and itself: the same keys in the same order as a
    decoding row whose cache holds them contiguously. Over contexts whose last chunk holds 0 to 127 context slots
    (where the tile path computes the context's part of a shared chunk once for every tree row of it), every tree
    row equals that decoding row bit for bit, in each path: fp32, bf16 (on AMX tiles where the machine has them),
    bf16a's pair products."""
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    g = torch.Generator().manual_seed(13)
    for c in (31, 32, 100, 127, 128, 160, 250, 383, 500):
        n = 12
        parent = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]
        k = (torch.randn(kv_heads, c + n, d, generator=g) * 2).to(dtype)
        v = torch.randn(kv_heads, c + n, d, generator=g).to(dtype)
        lines, extra = [], []
        for i in range(n):
            line, j = [], i
            while j >= 0:
                line.append(j)
                j = parent[j]
            lines.append(sorted(line))
            extra.append([c + a for a in lines[-1]])
        width = max(len(e) for e in extra)
        q = torch.randn(n, heads, d, generator=g)
        tree = lib.attention(q, [k], [v], torch.zeros(n, dtype=torch.long), torch.full((n,), c),
                             torch.tensor([e + [0] * (width - len(e)) for e in extra]),
                             torch.tensor([len(e) for e in extra]), d ** -0.5, ops.CHUNK, pairs)
        for i in range(n):
            keep = list(range(c)) + extra[i]                    # its keys, contiguous: a plain context
            plain = lib.attention(q[i:i + 1], [k[:, keep].contiguous()], [v[:, keep].contiguous()],
                                  torch.zeros(1, dtype=torch.long), torch.tensor([len(keep)]),
                                  torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, dtype=torch.long),
                                  d ** -0.5, ops.CHUNK, pairs)
            assert torch.equal(tree[i:i + 1].view(torch.int32), plain.view(torch.int32)), (lib.fp_isa(), c, i)


def reference_attention(q, ks, vs, seq, ctx, extra, n_extra):
    """Float64 attention of each row over its slots (context, then extra), for bounds on the kernels' error."""
    heads, kv_heads = q.shape[1], ks[0].shape[0]
    out = torch.zeros(q.shape, dtype=torch.float64)
    for i in range(q.shape[0]):
        slots = list(range(int(ctx[i]))) + extra[i, :int(n_extra[i])].tolist()
        for h in range(heads):
            kh = h // (heads // kv_heads)
            keys, values = ks[int(seq[i])][kh, slots].double(), vs[int(seq[i])][kh, slots].double()
            out[i, h] = torch.softmax(keys @ q[i, h].double() * q.shape[2] ** -0.5, 0) @ values
    return out


@pytest.mark.parametrize("heads, kv_heads, d", [(9, 3, 64), (12, 2, 128), (14, 2, 64), (14, 1, 64), (4, 4, 32)])
def test_attention_on_amx_tiles_gives_each_row_its_own_bits(heads, kv_heads, d):
    """Where the bf16 product runs on AMX tiles, attention over bf16 caches does too (head sizes a multiple of 32):
    rows of a 70-row chain, 9 tree rows with their ancestors (after 192 slots: one chunk of context they share,
    then one of context and extra slots each), a decoding row and 40 rows of a second chain, over contexts ending
    inside, on and past chunk boundaries: each row equals that row attended alone bit for bit
    (tiles of 1 to 16 (row, head) pairs), the whole pass equals itself on one thread, and every output is within
    5e-5 of float64 attention (queries and probabilities carry about 16 of their 24 bits into the tiles; the
    AVX-512 kernel's error is about 1e-6).
    Elsewhere this checks that the CPU's flags decide whether AMX runs."""
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    flags = kernels.cpu_flags()
    has = AMX_BF16 <= flags
    assert (lib.set_fp_isa("best") == "amx") == has, sorted(flags)
    if not has:
        return
    g = torch.Generator().manual_seed(12)
    cap = 300
    ks = [(torch.randn(kv_heads, cap, d, generator=g) * 2).bfloat16() for _ in range(4)]
    vs = [torch.randn(kv_heads, cap, d, generator=g).bfloat16() for _ in range(4)]
    seq, ctx, extra = [], [], []
    for r in range(70):
        seq.append(0), ctx.append(60 + r), extra.append([])
    for r in range(9):
        anc = sorted(torch.randperm(9, generator=g)[:r % 5].tolist())
        seq.append(1), ctx.append(192), extra.append([192 + a for a in anc] + [192 + 9 + r])
    seq.append(2), ctx.append(129), extra.append([])
    for r in range(40):
        seq.append(3), ctx.append(1 + 7 * r), extra.append([])
    width = max(len(e) for e in extra)
    n_extra = torch.tensor([len(e) for e in extra])
    extra = torch.tensor([e + [0] * (width - len(e)) for e in extra], dtype=torch.long)
    seq, ctx = torch.tensor(seq), torch.tensor(ctx)
    q = torch.randn(len(seq), heads, d, generator=g) * 2
    together = lib.attention(q, ks, vs, seq, ctx, extra, n_extra, d ** -0.5, ops.CHUNK, False)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:                                         # another split of the work between threads: the same bits
        one_thread = lib.attention(q, ks, vs, seq, ctx, extra, n_extra, d ** -0.5, ops.CHUNK, False)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(together.view(torch.int32), one_thread.view(torch.int32)), (heads, d)
    for i in range(len(seq)):
        alone = lib.attention(q[i:i + 1], ks, vs, seq[i:i + 1], ctx[i:i + 1], extra[i:i + 1], n_extra[i:i + 1],
                              d ** -0.5, ops.CHUNK, False)
        assert torch.equal(together[i:i + 1].view(torch.int32), alone.view(torch.int32)), (heads, d, i)
    error = (together.double() - reference_attention(q, ks, vs, seq, ctx, extra, n_extra)).abs().max().item()
    assert error < 5e-5, (heads, d, error)


@pytest.fixture(scope="module", params=["fp32", "bf16", "bf16a"])
def tiny(request):
    torch.manual_seed(0)
    model = Llama(CFG)
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.08)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "bf16a": torch.bfloat16}[request.param]
    model = model.to(dtype).eval().requires_grad_(False)
    if request.param == "bf16a":
        ops.bf16_activations(model)
    return model


def random_tree(n: int, g: torch.Generator) -> torch.Tensor:
    """[n, n] ancestry (node i sees its ancestors and itself; parents precede children)."""
    anc = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        anc[i] |= anc[int(torch.randint(0, i, (1,), generator=g))]
    return anc


def pass_and_reference(model, ctx: int, n: int, mask_tail, g):
    """The pass's hidden states [n, D], and the same rows computed one at a time by the reference."""
    prompt = torch.randint(0, CFG.vocab_size, (1, ctx), generator=g)
    tokens = torch.randint(0, CFG.vocab_size, (1, n), generator=g)
    positions = torch.arange(ctx, ctx + n)[None]
    mask = None
    if mask_tail is not None:
        mask = torch.cat([torch.ones(n, ctx, dtype=torch.bool), mask_tail], 1)[None]
        positions = ctx + mask_tail.sum(1)[None] - 1                              # depths
    out = []
    for reference in (False, True):
        cache = model.new_cache(ctx + n + 1)
        model(prompt, torch.arange(ctx)[None], cache)
        if reference:
            with ops.one_row_at_a_time():
                out.append(model(tokens, positions, cache, mask)[0])
        else:
            out.append(model(tokens, positions, cache, mask)[0])
    return out


@torch.inference_mode()
def test_switching_the_instruction_set_re_lays_out_every_cached_weight(tiny):
    """bf16 panels are laid out for the product that runs them (AMX tiles or not): a model run at the best
    instruction set, then at AVX-512, then at the best again gives the first run's bits the third time, and the
    AVX-512 run the bits of the model loaded afresh at AVX-512 (no layer, one-call stack or product keeps a stale
    layout; where there is no AMX-BF16 all three are one product). bf16a takes no AMX tile: the same bits at both."""
    lib = kernels.load()
    g = torch.Generator().manual_seed(9)
    prompt = torch.randint(0, CFG.vocab_size, (1, 40), generator=g)

    def logits(model):
        cache = model.new_cache(41)
        return model.logits(model(prompt, torch.arange(40)[None], cache))

    import copy
    try:
        first = logits(tiny)
        lib.set_fp_isa("avx512")
        portable = logits(tiny)
        fresh = logits(copy.deepcopy(tiny))
        lib.set_fp_isa("best")
        again = logits(tiny)
    finally:
        lib.set_fp_isa("best")
    assert torch.equal(first.view(torch.int32), again.view(torch.int32))
    assert torch.equal(portable.view(torch.int32), fresh.view(torch.int32))
    on_tiles = lib.fp_isa() == "amx" and tiny.dtype == torch.bfloat16 and not tiny.layers[0].attn.wqkv.act_bf16
    assert torch.equal(first.view(torch.int32), portable.view(torch.int32)) != on_tiles


@torch.inference_mode()
@pytest.mark.parametrize("seed", range(6))
def test_chains_and_trees_equal_the_row_by_row_reference(tiny, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(4):
        ctx = int(torch.randint(1, 300, (1,), generator=g))
        n = int(torch.randint(1, 65, (1,), generator=g))
        tail = random_tree(n, g) if torch.rand(1, generator=g) < 0.5 else None
        fast, ref = pass_and_reference(tiny, ctx, n, tail, g)
        assert torch.equal(fast, ref), (ctx, n, tail is not None, (fast - ref).abs().max())


@torch.inference_mode()
def test_plain_decoding_equals_one_verified_chain_and_tree(tiny):
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, CFG.vocab_size, (1, 150), generator=g)
    tokens = torch.randint(0, CFG.vocab_size, (1, 40), generator=g)
    caches = [tiny.new_cache(240) for _ in range(3)]
    for c in caches:
        tiny(prompt, torch.arange(150)[None], c)
    chain = tiny.logits(tiny(tokens, torch.arange(150, 190)[None], caches[0]))[0]
    # the same 40 tokens as one root-to-leaf path of a tree, with a decoy sibling at every level
    mask = torch.zeros(80, 80, dtype=torch.bool)
    for i in range(40):
        mask[2 * i, [2 * j for j in range(i + 1)]] = True                       # path node i: path 0..i
        mask[2 * i + 1, [2 * j for j in range(i)] + [2 * i + 1]] = True          # decoy at depth i
    tree_tokens = torch.stack([tokens[0], (tokens[0] + 1) % CFG.vocab_size], 1).reshape(1, 80)
    depths = (150 + torch.arange(40).repeat_interleave(2))[None]
    full = torch.cat([torch.ones(80, 150, dtype=torch.bool), mask], 1)[None]
    tree = tiny.logits(tiny(tree_tokens, depths, caches[1], full))[0, ::2]
    for i in range(40):
        plain = tiny.logits(tiny(tokens[:, i:i + 1], torch.tensor([[150 + i]]), caches[2]))[0, 0]
        assert torch.equal(plain, chain[i]) and torch.equal(plain, tree[i]), i


@torch.inference_mode()
@pytest.mark.parametrize("seed", range(4))
def test_packed_ragged_batches_equal_each_sequence_alone(tiny, seed):
    g = torch.Generator().manual_seed(100 + seed)
    segs = []
    for _ in range(int(torch.randint(2, 6, (1,), generator=g))):
        ctx = int(torch.randint(1, 200, (1,), generator=g))
        n = int(torch.randint(1, 20, (1,), generator=g))
        tail = random_tree(n, g) if torch.rand(1, generator=g) < 0.5 else None
        segs.append((torch.randint(0, CFG.vocab_size, (1, ctx), generator=g),
                     torch.randint(0, CFG.vocab_size, (1, n), generator=g), tail))

    def prepared():
        out = []
        for prompt, tokens, tail in segs:
            ctx, n = prompt.shape[1], tokens.shape[1]
            cache = tiny.new_cache(ctx + n + 1)
            tiny(prompt, torch.arange(ctx)[None], cache)
            mask = None if tail is None else torch.cat([torch.ones(n, ctx, dtype=torch.bool), tail], 1)[None]
            pos = torch.arange(ctx, ctx + n)[None] if tail is None else ctx + tail.sum(1)[None] - 1
            out.append((tokens, pos, cache, mask))
        return out

    together = tiny.forward_packed(prepared())
    alone = [tiny(*s) for s in prepared()]
    for a, b in zip(together, alone):
        assert torch.equal(a, b)


@torch.inference_mode()
def test_real_model_rows_equal_the_reference(target_bf16):
    model = target_bf16.model
    g = torch.Generator().manual_seed(3)
    ctx, n = 97, 33
    prompt = torch.randint(0, 1000, (1, ctx), generator=g)
    tokens = torch.randint(0, 1000, (1, n), generator=g)
    outs = []
    for reference in (False, True):
        cache = model.new_cache(ctx + n)
        model(prompt, torch.arange(ctx)[None], cache)
        with ops.one_row_at_a_time() if reference else torch.inference_mode():
            outs.append(model.logits(model(tokens, torch.arange(ctx, ctx + n)[None], cache)))
    assert torch.equal(outs[0], outs[1])


@torch.inference_mode()
def test_a_long_prefill_split_into_row_blocks_equals_each_row_alone():
    """A long pass (a prefill) is attended in blocks of rows that bound the kernel's partial outputs (~32 MB), and
    rows of one sequence share each widened chunk of context keys: every row still equals its row attended alone.
    32 heads of 128 make the block 2,048 (row, chunk) partials, so 600 causal rows span several blocks."""
    from verispec.model.kv_cache import KVCache
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    g = torch.Generator().manual_seed(5)
    heads, kv_heads, d, n = 32, 8, 128, 600
    qkv = torch.randn(n, (heads + 2 * kv_heads) * d, generator=g)
    cos, sin = torch.randn(n, d // 2, generator=g), torch.randn(n, d // 2, generator=g)
    out = []
    for alone in (False, True):
        cache = KVCache(1, 1, kv_heads, n, d, torch.bfloat16, torch.device("cpu"))
        spans = [(i, i + 1) for i in range(n)] if alone else [(0, n)]
        parts = []
        for a, b in spans:
            rows = ops.Rows.plan([(cache, 0, b - a, None)])
            ks, vs = rows.caches(0)
            parts.append(lib.attention_step(qkv[a:b], cos[a:b], sin[a:b], ks, vs, rows.seq, rows.slot, rows.ctx,
                                            rows.extra, rows.n_extra, heads, d ** -0.5, ops.CHUNK, False))
            cache.advance(b - a)
        out.append(torch.cat(parts))
    assert torch.equal(out[0].view(torch.int32), out[1].view(torch.int32))


def test_a_layer_sees_its_weights_change_after_decoding():
    """A decoding layer's kernel arguments are built once (`fused._Fused`): a weight changed in place, replaced, or
    converted to another dtype, or its module replaced, after a pass must give the new weights' output, as a fresh
    model does."""
    torch.manual_seed(1)
    model = Llama(CFG).eval().requires_grad_(False)
    tokens, positions = torch.randint(0, CFG.vocab_size, (1, 5)), torch.arange(5)[None]

    def run(m):
        return m(tokens, positions, m.new_cache(8))

    def fresh():
        twin = Llama(CFG).eval().requires_grad_(False)
        twin.load_state_dict(model.state_dict())
        return twin.to(model.dtype)

    with torch.inference_mode():
        run(model)
    with torch.no_grad():
        model.layers[0].mlp.w2.weight.mul_(2)                                # in place
    with torch.inference_mode():
        assert torch.equal(run(model), run(fresh()))
    model.layers[1].attn.wqkv.weight = torch.nn.Parameter(torch.randn_like(model.layers[1].attn.wqkv.weight),
                                                          requires_grad=False)  # replaced
    with torch.inference_mode():
        assert torch.equal(run(model), run(fresh()))
    w13 = model.layers[1].mlp.w13
    swapped = type(w13)(w13.in_features, w13.out_features, bias=False).requires_grad_(False)
    model.layers[1].mlp.w13 = swapped                                          # a module replaced
    with torch.inference_mode():
        assert torch.equal(run(model), run(fresh()))
    model.to(torch.bfloat16)                                                   # another dtype
    with torch.inference_mode():
        assert torch.equal(run(model), run(fresh()))


def test_all_layers_in_one_call_are_the_layers_called_one_by_one():
    """`fused.stack` makes every layer's kernel call from C++ (kernels/stack.cpp): the same bits as the layers
    called one by one, for a prefill, a token tree and a packed batch of two sequences; a forward hook on a layer
    (training taps features there) still sees it, since the model then runs layer by layer."""
    from verispec.model import fused
    torch.manual_seed(2)
    model = Llama(CFG).eval().requires_grad_(False).to(torch.bfloat16)
    a, b = torch.randint(0, CFG.vocab_size, (1, 7)), torch.randint(0, CFG.vocab_size, (1, 4))
    mask = torch.cat([torch.ones(3, 7, dtype=torch.bool), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 0, 1]]).bool()], 1)

    def run():
        one, two = model.new_cache(16), model.new_cache(16)
        prefill = model(a, torch.arange(7)[None], one)
        tree = model(a[:, :3], torch.tensor([[7, 8, 8]]), one, mask[None])
        model(b, torch.arange(4)[None], two)
        packed = model.forward_packed([(a[:, :2], torch.tensor([[10, 11]]), one, None),
                                       (b[:, :1], torch.tensor([[4]]), two, None)])
        return [prefill, tree, *packed]

    with torch.inference_mode():
        together = run()
        assert isinstance(model.layers.__dict__.get("_stack"), fused._Stack)        # it ran as one call
        seen = []
        hook = model.layers[1].register_forward_hook(lambda module, args, y: seen.append(y.shape))
        one_by_one = run()
        hook.remove()
    assert len(seen) == 4
    for x, y in zip(together, one_by_one):
        assert torch.equal(x.view(torch.int16), y.view(torch.int16))


def test_a_pass_in_one_call_lets_other_threads_run():
    """The one-call pass releases the GIL (kernels/stack.cpp): while the server's decoding thread runs a pass, its
    HTTP thread keeps running. A counting thread makes progress during a pass of about 0.2 s; were the GIL held,
    it could run only in the switch intervals (5 ms) of the pass's Python parts."""
    import threading
    import time
    cfg = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=1024, num_layers=4, num_heads=4,
                      num_kv_heads=2, max_position=4096)
    model = Llama(cfg).eval().requires_grad_(False)
    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1

    def prefill():
        t0 = time.perf_counter()
        model(torch.zeros(1, 2048, dtype=torch.long), torch.arange(2048)[None], model.new_cache(2048))
        return time.perf_counter() - t0

    with torch.inference_mode():
        prefill()                                                                    # builds the stack
        thread = threading.Thread(target=count)
        thread.start()
        time.sleep(0.05)
        before, t0 = ticks[0], time.perf_counter()
        time.sleep(0.05)
        rate = (ticks[0] - before) / (time.perf_counter() - t0)                      # ticks a second, alone
        before = ticks[0]
        seconds = prefill()
        during = ticks[0] - before
        stop.set()
        thread.join()
    assert isinstance(model.layers.__dict__.get("_stack"), fused._Stack)
    # released: the counter ran about as fast as alone (1.1 of `rate`, measured); held: only in the switch
    # intervals of the pass's Python parts (0.05)
    assert during > 0.15 * rate * seconds, f"{during} counts in {seconds:.3f} s, {rate:.0f} a second alone"


def test_the_one_call_pass_steps_aside_for_changed_layers():
    """The stack runs only plain decoder layers: a layer whose forward is replaced runs its own forward, a model
    cut to fewer layers than its cache holds still runs, and a model pickles after a pass (the kernel object is
    dropped and rebuilt)."""
    import io
    torch.manual_seed(4)
    model = Llama(CFG).eval().requires_grad_(False)
    tokens, positions = torch.randint(0, CFG.vocab_size, (1, 5)), torch.arange(5)[None]
    with torch.inference_mode():
        base = model(tokens, positions, model.new_cache(8))
        buffer = io.BytesIO()
        torch.save(model, buffer)                                                    # after a pass
        block = model.layers[1]
        block.forward = lambda x, rope, rows, layer: x                               # an identity layer
        skipped = model(tokens, positions, model.new_cache(8))
        del block.forward
        assert not torch.equal(skipped, base) and torch.equal(model(tokens, positions, model.new_cache(8)), base)
        cache = model.new_cache(8)                                                   # two layers' worth
        model.layers = torch.nn.ModuleList([model.layers[0]])
        model(tokens, positions, cache)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    with torch.inference_mode():
        assert torch.equal(again(tokens, positions, again.new_cache(8)), base)
