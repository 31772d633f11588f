"""`--dtype bf16a`: bf16 weights times activations rounded to bf16, summed in fp32 in pairs of k
(`verispec/kernels/dpbf16.h`). The kernel against its definition written in PyTorch, the AVX512_BF16 instruction
against the AVX2 FMA steps (where the CPU has it), rows alone against rows together, and the dtype end to end."""
import pytest
import torch

from verispec import kernels
from verispec.errors import VerispecError
from verispec.model import loader, ops


def definition(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] fp32, w [N, K] bf16 -> [M, N] fp32 as dpbf16.h defines it, for values far from fp32's denormals:
    per pair of k, the odd product added first, then the even (a bf16 x bf16 product is exact in fp32, so each
    fp32 add is the fused multiply-add's one rounding)."""
    xb, wf = x.to(torch.bfloat16).float(), w.float()
    acc = torch.zeros(x.shape[0], w.shape[0])
    for j in range(x.shape[1] // 2):
        acc = acc + xb[:, 2 * j + 1, None] * wf[None, :, 2 * j + 1]
        acc = acc + xb[:, 2 * j, None] * wf[None, :, 2 * j]
    return acc if bias is None else acc + bias


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32)


def test_the_pair_product_is_its_definition_on_every_instruction_set():
    lib = kernels.load()
    assert lib is not None, f"row-invariant kernels unavailable: {kernels.status()}"
    g = torch.Generator().manual_seed(11)
    try:
        for n, k in ((200, 96), (49, 40), (16, 2), (33, 576)):
            w = (torch.randn(n, k, generator=g) * 0.2).to(torch.bfloat16)
            bias = torch.randn(n, generator=g) if n != 16 else None
            panels = ops._panels(w, pairs=True)
            assert panels.dtype == torch.int32 and panels.shape == ((n + 15) // 16, k // 2, 16)
            for m in (1, 2, 5, 12, 13, 25, 97, 130):
                x = torch.randn(m, k, generator=g) * 3
                want = definition(x, w, bias)
                lib.set_fp_isa("avx2")
                narrow = lib.linear(x, panels, n, bias)
                lib.set_fp_isa("best")
                best = lib.linear(x, panels, n, bias)
                alone = torch.cat([lib.linear(x[i:i + 1], panels, n, bias) for i in range(m)])
                assert torch.equal(bits(narrow), bits(want)), (n, k, m, (narrow - want).abs().max())
                assert torch.equal(bits(best), bits(want)), (lib.fp_isa(), n, k, m)
                assert torch.equal(bits(alone), bits(want)), (n, k, m)
    finally:
        lib.set_fp_isa("best")


def test_denormals_flush_alike_on_every_instruction_set():
    """Products and sums near fp32's smallest normal: `vdpbf16ps` reads denormal inputs as zero and flushes
    denormal results, and so do the AVX2 FMAs (MXCSR's DAZ and FTZ). Infinities alike; a NaN (one per row here)
    reaches every output of its row alike."""
    lib = kernels.load()
    g = torch.Generator().manual_seed(12)
    n, k, m = 32, 64, 7
    scale = torch.exp2(torch.randint(-70, -50, (m, k), generator=g).float())
    x = torch.randn(m, k, generator=g) * scale
    x[0, :8] = torch.tensor([1e-39, -3e-39, 2e-38, 0.0, -0.0, float("inf"), 1e-45, 5e-39])
    x[1, 3] = float("nan")
    w = (torch.randn(n, k, generator=g) * torch.exp2(torch.randint(-70, -50, (n, k), generator=g).float()))
    w = w.to(torch.bfloat16)
    panels = ops._panels(w, pairs=True)
    try:
        lib.set_fp_isa("avx2")
        narrow = lib.linear(x, panels, n, None)
    finally:
        lib.set_fp_isa("best")
    best = lib.linear(x, panels, n, None)
    assert torch.equal(bits(narrow), bits(best))
    finite = narrow[2:]
    assert finite.isfinite().all() and ((finite == 0) | (finite.abs() >= torch.finfo(torch.float32).tiny)).all()
    assert narrow[1].isnan().all()


def test_a_bf16a_model_is_bf16_weights_with_bf16_activations(target_bf16):
    """The default model in bf16a: every product flagged, its logits within bf16's rounding of bf16's, and a
    pass's rows equal to each row alone (the reference)."""
    model, _, _ = loader.load(None, "bf16a")
    linears = [m for m in model.modules() if isinstance(m, ops.Linear)]
    assert linears and all(m.act_bf16 for m in linears)
    assert not any(m.act_bf16 for m in target_bf16.model.modules() if isinstance(m, ops.Linear))
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 1000, (1, 40), generator=g)
    outs = []
    for m in (model, target_bf16.model):
        with torch.inference_mode():
            outs.append(m.logits(m(ids, torch.arange(40)[None], m.new_cache(41)))[0].float())
    a, b = outs
    assert not torch.equal(a, b)
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.9
    with torch.inference_mode():
        cache = model.new_cache(41)
        together = model.logits(model(ids, torch.arange(40)[None], cache))
        cache = model.new_cache(41)
        with ops.one_row_at_a_time():
            alone = model.logits(model(ids, torch.arange(40)[None], cache))
    assert torch.equal(together, alone)


def test_bf16a_refuses_what_it_cannot_run():
    with pytest.raises(VerispecError, match="CPU only"):
        loader.load(None, "bf16a", device="meta")
    odd = torch.nn.Sequential(ops.Linear(3, 4).bfloat16())
    with pytest.raises(ValueError, match="input width even"):
        ops.bf16_activations(odd)
    with pytest.raises(ValueError, match="need bf16 weights"):
        ops.bf16_activations(torch.nn.Sequential(ops.Linear(4, 4)))
    with pytest.raises(ValueError, match="hold bf16 weights"):
        ops._panels(torch.randn(16, 4), pairs=True)


def test_vdpbf16ps_runs_where_the_cpu_has_it():
    """The pair product runs vdpbf16ps wherever the CPU has AVX512_BF16: its self-check against the AVX2 steps
    (edge inputs: underflow, denormals, cancellation) passed. A CPU whose instruction gives other bits still decodes
    bf16a's bits, on the AVX2 steps, but fails here by name."""
    lib = kernels.load()
    has = {"avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"} <= kernels.cpu_flags()
    assert lib.pairs_isa() == ("avx512_bf16" if has else "avx2"), sorted(kernels.cpu_flags())
    try:
        lib.set_fp_isa("avx2")
        assert lib.pairs_isa() == "avx2"
    finally:
        lib.set_fp_isa("best")


@torch.inference_mode()
def test_turning_bf16_activations_on_after_a_pass_re_lays_out_every_layer():
    """Each layer's, and the one-call stack's, cached weight layouts watch `act_bf16`: a model flagged after it has
    run gives a model flagged before any pass its bits."""
    import copy

    from verispec.model.llama import Llama, LlamaConfig
    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                              num_kv_heads=2, max_position=128))
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.08)
    model = model.to(torch.bfloat16).eval().requires_grad_(False)
    fresh = copy.deepcopy(model)
    ops.bf16_activations(fresh)
    ids = torch.randint(0, 256, (1, 16))

    def logits(m):
        return m.logits(m(ids, torch.arange(16)[None], m.new_cache(17)))

    before = logits(model)
    ops.bf16_activations(model)
    after = logits(model)
    assert not torch.equal(before, after)
    assert torch.equal(after, logits(fresh))


def test_activations_round_as_torch_rounds_to_bf16():
    """The kernel's rounding of activations (8 at a time, and the scalar tail) is round-to-nearest-even, as
    torch's conversion to bf16: ties, carries into the exponent, the largest finite values, signs. An identity
    weight reads each rounded activation back (no infinities: an infinity times the identity's zeros is NaN)."""
    lib = kernels.load()
    one = 1.0 + 2.0 ** -8
    values = torch.tensor([one, 1.0 + 3 * 2.0 ** -8, -one, 1.0 - 2.0 ** -9, 2.0 - 2.0 ** -9, 3.39e38, -3.39e38,
                           3.38e38, 1e30, -2.5e-3, 6.1e-5, 0.0, -0.0, -1e-30, 65504.0, 1e-30, 7.0, -7.5, 123.456,
                           1.0 + 2.0 ** -16])
    for k in (20, 18):                                     # 18: two values left for the scalar tail
        x = values[:k].reshape(1, k)
        y = lib.linear(x.contiguous(), ops._panels(torch.eye(k, dtype=torch.bfloat16), pairs=True), k, None)
        want = x.to(torch.bfloat16).float() + 0.0          # the identity's zero products turn -0 into +0
        assert torch.equal(bits(y), bits(want)), (y, want)
