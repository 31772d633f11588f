"""Rows planned once (`RowPlan`), masks over a pass's last slots, the final norm in the one-call pass, the weights'
watch, and the greedy token's kernel: each gives exactly what it replaces."""
import pytest
import torch

from verispec import kernels
from verispec.model import fused, ops
from verispec.model.kv_cache import KVCache
from verispec.model.llama import Llama, LlamaConfig
from verispec.sampling import top_tokens

CFG = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
                  max_position=1024)


def random_tree(n: int, g: torch.Generator) -> torch.Tensor:
    """[n, n] ancestry: node i sees its ancestors and itself (parents precede children)."""
    anc = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        anc[i] |= anc[int(torch.randint(0, i, (1,), generator=g))]
    return anc


def visible(rows: ops.Rows) -> list[list[int]]:
    """Each row's slots in the order it reads them: [0, ctx), then its extra slots."""
    return [list(range(int(c))) + rows.extra[r, :int(k)].tolist()
            for r, (c, k) in enumerate(zip(rows.ctx, rows.n_extra))]


@pytest.mark.parametrize("seed", range(4))
def test_a_mask_over_the_last_slots_and_its_plan_give_the_whole_masks_rows(seed):
    """A mask [n, w] over the last w slots (every row seeing the slots before them), and that mask planned once
    (`RowPlan`, placed at each pass), give the rows `Rows.plan` gives for the mask spelled out over the whole
    cache: alone, in a packed pass, and at another cache length (the plan reused)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(20):
        n, before = int(torch.randint(1, 20, (1,), generator=g)), int(torch.randint(0, 12, (1,), generator=g))
        start = before + int(torch.randint(0, 300, (1,), generator=g))
        tail = torch.cat([torch.rand(n, before, generator=g) < 0.5, random_tree(n, g)], 1)   # [n, before + n]
        plan = ops.RowPlan(n, tail)
        for length in (start, start + 37):
            cache = KVCache(1, 1, 1, length + n, 8, torch.float32)
            cache.length = length
            whole = torch.cat([torch.ones(n, length - before, dtype=torch.bool), tail], 1)
            want = ops.Rows.plan([(cache, 0, n, whole)])
            for got in (ops.Rows.plan([(cache, 0, n, tail)]), plan.at(cache)):
                assert torch.equal(got.slot, want.slot) and torch.equal(got.seq, want.seq)
                assert visible(got) == visible(want)
            chain = KVCache(1, 1, 1, 40, 8, torch.float32)
            chain.length = 5
            packed = ops.Rows.plan([(chain, 0, 3, None), (cache, 0, n, plan)])
            assert visible(packed)[3:] == visible(want) and packed.seq[3:].eq(1).all()
    with pytest.raises(ValueError, match="covers"):
        ops.RowPlan(2, torch.ones(2, 6, dtype=torch.bool)).at(KVCache(1, 1, 1, 8, 8, torch.float32))


@torch.inference_mode()
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_pass_gives_the_same_bits_with_its_mask_whole_trailing_or_planned(dtype):
    torch.manual_seed(3)
    model = Llama(CFG).to(dtype).eval().requires_grad_(False)
    g = torch.Generator().manual_seed(5)
    prompt = torch.randint(0, CFG.vocab_size, (1, 150), generator=g)
    tree = random_tree(9, g)
    tokens, positions = torch.randint(0, CFG.vocab_size, (1, 9), generator=g), 150 + tree.sum(1)[None] - 1
    out = []
    for mask in (torch.cat([torch.ones(9, 150, dtype=torch.bool), tree], 1)[None], tree[None], ops.RowPlan(9, tree)):
        cache = model.new_cache(160)
        model(prompt, torch.arange(150)[None], cache)
        out.append(model(tokens, positions, cache, mask))
        assert cache.length == 159
    for got in out[1:]:
        assert torch.equal(got.float().view(torch.int32), out[0].float().view(torch.int32))


@torch.inference_mode()
def test_the_final_norm_runs_in_the_one_call_pass_as_the_module_would():
    """The one-call pass ends with the model's final RMSNorm (kernels/stack.cpp): the bits of the norm module run
    after it (a hook on the norm makes it run as a module, and sees it run). A norm weight changed in place, its
    `.data` replaced, or the norm replaced after a pass give the new norm's output, as a fresh model does."""
    torch.manual_seed(6)
    model = Llama(CFG).eval().requires_grad_(False)
    tokens, positions = torch.randint(0, CFG.vocab_size, (1, 6)), torch.arange(6)[None]

    def run(m):
        return m(tokens, positions, m.new_cache(8))

    def fresh():
        twin = Llama(CFG).eval().requires_grad_(False)
        twin.load_state_dict(model.state_dict(), strict=isinstance(model.norm, ops.RMSNorm))
        if isinstance(model.norm, ops.RMSNorm):
            twin.norm.eps = model.norm.eps
        else:
            twin.norm = model.norm
        return twin

    together = run(model)
    assert model.layers.__dict__["_stack"].norm is model.norm                      # the norm ran in the call
    seen = []
    hook = model.norm.register_forward_hook(lambda module, args, y: seen.append(y.shape))
    by_module = run(model)
    hook.remove()
    assert seen and torch.equal(together.view(torch.int32), by_module.view(torch.int32))
    model.norm.weight.mul_(1.5)                                                    # in place
    assert torch.equal(run(model), run(fresh()))
    model.norm.weight.data = torch.rand(CFG.hidden_size)                           # `.data` replaced
    assert torch.equal(run(model), run(fresh()))
    model.norm.eps = 1e-2                                                          # its eps
    assert torch.equal(run(model), run(fresh()))
    model.norm = ops.RMSNorm(CFG.hidden_size, CFG.rms_eps)                         # the module replaced
    model.norm.weight.data.uniform_(0.5, 1.5)
    assert torch.equal(run(model), run(fresh()))
    model.norm = torch.nn.Identity()                                               # not an RMSNorm: run after
    assert torch.equal(run(model), run(fresh()))


def test_the_weights_watch_sees_every_kind_of_change():
    """`fused._Watched` (kernels/stack.cpp `Watch`) says a tensor changed when it changed in place, was given
    other storage, shape or dtype through `.data`, or a watched object was replaced; a copy watches its copies."""
    import copy
    lin = ops.Linear(16, 8, bias=False).requires_grad_(False)
    holder = {"w": lin.weight, "flag": False}
    watched = fused._Watched([(lin._parameters, "weight", lin.weight), (holder, "flag", False)])
    assert watched.unchanged()
    twin = copy.deepcopy(watched)
    assert twin.unchanged() and twin.objs[0] is not lin.weight
    lin.weight.add_(1)
    assert not watched.unchanged() and twin.unchanged()
    for change in (lambda w: w.clone(), lambda w: w.reshape(16, 8), lambda w: w.to(torch.bfloat16)):
        watched = fused._Watched([(lin._parameters, "weight", lin.weight)])
        lin.weight.data = change(lin.weight.data)
        assert not watched.unchanged()
    watched = fused._Watched([(holder, "flag", False)])
    holder["flag"] = True
    assert not watched.unchanged()


def test_the_greedy_token_is_torchs_argmax():
    """`top_tokens` (kernels `argmax_rows` on the CPU) picks what `max(-1).indices` picks: the first of tied maxima,
    the first NaN where there is one, -0 tied with +0, rows of any width (the kernel's lanes and its tail)."""
    if kernels.load() is None:
        pytest.skip(f"the kernels do not run here: {kernels.status()}")
    g = torch.Generator().manual_seed(0)
    for trial in range(600):
        rows, width = int(torch.randint(1, 10, (1,), generator=g)), int(torch.randint(1, 200, (1,), generator=g))
        width = 49152 if trial % 10 == 0 else width
        x = torch.randint(-3, 4, (rows, width), generator=g).float() if trial % 2 else \
            torch.randn(rows, width, generator=g)
        if trial % 5 == 0:
            x[torch.rand(rows, width, generator=g) < 0.02] = float("nan")
        if trial % 7 == 0:
            x[torch.rand(rows, width, generator=g) < 0.5] = float("-inf")
        if trial % 9 == 0:
            x[x == 0] = -0.0
        if trial % 11 == 0:
            x[:] = float("-inf") if trial % 22 else float("inf")
        assert torch.equal(top_tokens(x), x.max(-1).indices), trial
    x = torch.randn(2, 3, 100, generator=g)
    assert torch.equal(top_tokens(x), x.max(-1).indices)                           # any leading shape


def test_silu_gives_the_same_bits_on_16_lanes_and_on_8():
    """`silu_mul` on AVX-512 runs AVX2's 8-lane sequence 16 lanes at a time (and its tail 8 at a time): forcing the
    AVX2 kernels gives the same bits, for any row count and width (a multiple of 8)."""
    lib = kernels.load()
    if lib is None:
        pytest.skip(f"the kernels do not run here: {kernels.status()}")
    g = torch.Generator().manual_seed(1)
    try:
        for rows, width in ((1, 1536), (9, 1536), (5, 8), (3, 24), (17, 4864)):
            x = torch.randn(rows, 2 * width, generator=g) * 6
            lib.set_fp_isa("best")
            best = lib.silu_mul(x)
            lib.set_fp_isa("avx2")
            assert torch.equal(best.view(torch.int32), lib.silu_mul(x).view(torch.int32)), (rows, width)
            gate, up = x.chunk(2, -1)
            torch.testing.assert_close(best, torch.nn.functional.silu(gate) * up, rtol=1e-5, atol=1e-5)
    finally:
        lib.set_fp_isa(kernels.isa_asked())
