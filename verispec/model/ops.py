"""The model's reductions, each row-invariant: a row's result depends on that row alone, bit for bit.

Every floating-point reduction in a decoding pass goes through here: matrix products (`Linear`, `product`),
RMSNorm, SiLU-and-multiply and attention (`attend`). On x86-64 CPUs with AVX2 they run verispec's own kernels
(`verispec.kernels`), which fix each output's order of operations whatever the number of rows, so plain decoding
and the verification of chains, trees and packed batches agree by construction. Elsewhere (CUDA, training with
gradients, a machine without the kernels) they fall back to PyTorch's operators, which promise no such thing:
`invariant(t)` says which applies, and `verispec doctor` reports it.

`one_row_at_a_time()` is the slow reference: every reduction runs over one row at a time, exactly as decoding each
row alone would, and tests compare the fast path with it bit for bit.
"""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from .. import kernels
from .rows import CHUNK, RowPlan, Rows, store_kind  # noqa: F401  (the model's modules read them here)

_reference = [False]
_pytorch = [False]


@contextlib.contextmanager
def one_row_at_a_time():
    """Run every reduction one row at a time (the slow reference the fast path must equal bit for bit)."""
    _reference[0] = True
    try:
        yield
    finally:
        _reference[0] = False


@contextlib.contextmanager
def pytorch_operators():
    """PyTorch's own operators instead of the row-invariant kernels (oneDNN: AMX or AVX-512 bf16 where the CPU has
    them, several times faster over whole sequences there), not row-invariant: for training features, never for
    decoding."""
    _pytorch[0] = True
    try:
        yield
    finally:
        _pytorch[0] = False


def invariant(t: torch.Tensor) -> bool:
    """Whether `t`'s reductions run on the row-invariant kernels (CPU, kernels built, no gradient needed, not
    inside `pytorch_operators()`)."""
    return (t.device.type == "cpu" and not _pytorch[0] and not (torch.is_grad_enabled() and t.requires_grad)
            and kernels.load() is not None)


def _rows(fn, x: torch.Tensor) -> torch.Tensor:
    """fn over x [M, ...], or row by row under one_row_at_a_time()."""
    if _reference[0] and x.shape[0] > 1:
        return torch.cat([fn(x[i:i + 1]) for i in range(x.shape[0])])
    return fn(x)


def _panels(weight: torch.Tensor, amx: bool | None = None, pairs: bool = False) -> torch.Tensor:
    """[N, K] -> [ceil(N / 16), K, 16]: 16 outputs' weights side by side for each k (the kernel's layout); with
    `amx` (None: where the bf16 product runs on AMX tiles now, `amx_layout`) [P, K/2, 32]: for each pair of k,
    the 16 outputs' two weights side by side, the layout an AMX tile loads; with `pairs` (bf16 weights, --dtype
    bf16a) that layout as int32 [P, K/2, 16], each element one output's pair (`kernels/dpbf16.h`)."""
    n, k = weight.shape
    pad = -n % 16
    w = F.pad(weight.detach(), (0, 0, 0, pad)) if pad else weight.detach()
    panels = w.view(-1, 16, k).transpose(1, 2)                                        # [P, K, 16]
    if amx is None:
        amx = amx_layout(weight) and not pairs
    if pairs and weight.dtype != torch.bfloat16:
        raise ValueError(f"pair panels hold bf16 weights, not {weight.dtype}")
    if not (amx or pairs):
        return panels.contiguous()
    paired = panels.reshape(-1, k // 2, 2, 16).transpose(2, 3).reshape(-1, k // 2, 32).contiguous()
    return paired.view(torch.int32) if pairs else paired                              # [P, K/2, 16] int32


def amx_layout(weight: torch.Tensor) -> bool:
    """Whether this weight's product runs on AMX tiles now (bf16, K a multiple of 32, the CPU's AMX-BF16 on)."""
    return weight.dtype == torch.bfloat16 and weight.shape[-1] % 32 == 0 and kernels.bf16_on_amx()


def _has_version(t: torch.Tensor) -> bool:
    """Whether t has an in-place version counter: a true inference tensor has none (a Parameter whose `.data` was
    set to one reports itself as an inference tensor yet keeps a counter, and changes in place)."""
    try:
        t._version
        return True
    except RuntimeError:
        return False


def _version(t: torch.Tensor) -> int:
    """t's in-place version counter, 0 where it has none (`_has_version`)."""
    return t._version if _has_version(t) else 0


class _Packed:
    """A weight's panels and fp32 bias, rebuilt whenever the weight changes (training, loading, dtype)."""

    def __init__(self):
        self.key, self.panels, self.bias = None, None, None

    def get(self, weight: torch.Tensor, bias: torch.Tensor | None, pairs: bool = False):
        amx = amx_layout(weight) and not pairs
        key = (weight.data_ptr(), _version(weight), weight.dtype, None if bias is None else _version(bias), amx, pairs)
        if key != self.key:
            self.panels = _panels(weight, amx, pairs)
            self.bias = None if bias is None else bias.detach().float().contiguous()
            self.key = key
        return self.panels, self.bias


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, packed: _Packed,
            fp32: bool, act_bf16: bool = False) -> torch.Tensor:
    """x [..., K] -> x @ weight.T + bias [..., N], in fp32 if `fp32` else in x's dtype; `act_bf16` (bf16 weights,
    --dtype bf16a): x rounded to bf16 first, the kernel's pair product (`kernels/dpbf16.h`)."""
    if not (invariant(x) and invariant(weight)):
        b = None if bias is None else bias.to(x.dtype)
        rows = x.reshape(-1, x.shape[-1])
        if act_bf16:
            rows = rows.to(torch.bfloat16).to(x.dtype)
        y = _rows(lambda r: F.linear(r, weight.to(x.dtype), b), rows).view(*x.shape[:-1], weight.shape[0])
        return y.float() if fp32 else y
    panels, b = packed.get(weight, bias, act_bf16)
    k = kernels.load()
    rows = x.reshape(-1, x.shape[-1]).float().contiguous()                            # [M, K]
    y = _rows(lambda r: k.linear(r, panels, weight.shape[0], b), rows)                 # [M, N] fp32
    y = y.view(*x.shape[:-1], weight.shape[0])
    return y if fp32 else y.to(x.dtype)


class Linear(nn.Linear):
    """nn.Linear whose inference product is row-invariant (same parameters, same state-dict names).

    `quant`, when set (--dtype gguf), holds the matrix as GGUF-quantized parts stacked along the outputs
    ([quant.Packed], e.g. q, k and v); the weight is then only a shape (on the meta device). `int8` (--dtype
    gguf-q8) multiplies them with 8-bit activations and integer sums (`quant.matmul_q8`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._packed = _Packed()
        self.quant = None
        self.int8 = False
        self.act_bf16 = False

    def panels(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The kernel's weight layout and fp32 bias (rebuilt when the weight changes)."""
        return self._packed.get(self.weight, self.bias, self.act_bf16)

    def forward(self, x: torch.Tensor, fp32: bool = False) -> torch.Tensor:
        if self.quant is not None:
            return self._quantized(x, fp32)
        return _linear(x, self.weight, self.bias, self._packed, fp32, self.act_bf16)

    def _quantized(self, x: torch.Tensor, fp32: bool) -> torch.Tensor:
        """x [..., K] -> [..., N]: each part's product on its quantized blocks, each output one fp32 FMA chain
        (as `_linear` on the fp32 dequantized weight: the same bits), or with int8 its integer product."""
        from . import quant
        rows = x.reshape(-1, x.shape[-1])                                              # [M, K]
        mm = quant.matmul_q8 if self.int8 else quant.matmul
        if len(self.quant) == 1:                                                        # the usual case: one call
            y = _rows(lambda r: mm(r, self.quant[0], self.bias), rows)
        else:
            biases = [None] * len(self.quant) if self.bias is None else self.bias.split([p.n for p in self.quant])
            y = _rows(lambda r: torch.cat([mm(r, p, b) for p, b in zip(self.quant, biases)], -1), rows)
        y = y.view(*x.shape[:-1], self.out_features)                                   # fp32
        return y if fp32 else y.to(x.dtype)


def bf16_activations(model: nn.Module) -> None:
    """--dtype bf16a: every `Linear` of `model` (bf16 weights) rounds its activations to bf16 and runs the pair
    product (`kernels/dpbf16.h`). Every product's input width must be even (its k come in pairs)."""
    linears = [m for m in model.modules() if isinstance(m, Linear)]
    odd = [m.in_features for m in linears if m.in_features % 2]
    if odd:
        raise ValueError(f"bf16 activations need every product's input width even; this model has {odd[0]}")
    other = [m.weight.dtype for m in linears if m.weight.dtype != torch.bfloat16 or m.quant is not None]
    if other:
        raise ValueError(f"bf16 activations need bf16 weights; this model has {other[0]} ones")
    for m in linears:
        m.act_bf16 = True


def product(weight: torch.Tensor):
    """x [..., in] -> x @ weight.T [..., out] in fp32, row-invariant, for a fixed weight [out, in]."""
    packed = _Packed()
    return lambda x: _linear(x, weight, None, packed, True)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self._w32 = _Packed()

    def weight32(self) -> torch.Tensor:
        key = (self.weight.data_ptr(), _version(self.weight))
        if self._w32.key != key:
            self._w32.key, self._w32.bias = key, self.weight.detach().float().contiguous()
        return self._w32.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not (invariant(x) and invariant(self.weight)) or x.shape[-1] % 8:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        rows = x.reshape(-1, x.shape[-1]).contiguous()                                # [M, D]
        y = _rows(lambda r: kernels.load().rms_norm(r, self.weight32(), self.eps), rows)
        return y.view(x.shape).to(x.dtype)


def silu_mul(gate_up: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[..., 2F] (gate, up) -> silu(gate) * up [..., F] in `dtype`."""
    if not invariant(gate_up) or gate_up.dtype != torch.float32 or gate_up.shape[-1] % 16:
        gate, up = gate_up.chunk(2, dim=-1)
        return (F.silu(gate) * up).to(dtype)
    rows = gate_up.reshape(-1, gate_up.shape[-1]).contiguous()
    return kernels.load().silu_mul(rows).view(*gate_up.shape[:-1], -1).to(dtype)


def attend(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rows: Rows, layer: int,
           heads: int, pairs: bool = False) -> torch.Tensor:
    """One layer's attention on the kernels: qkv [R, (heads + 2 kv_heads) d] fp32 projections; cos, sin [R, d/2]
    fp32 RoPE angles per row. Rotates q and k, writes each row's k and v into its cache slot, and attends each row
    over its own keys (`Rows`) -> [R, heads * d] fp32. pairs: bf16a's attention (bf16 pair products, a bf16 cache)."""
    k = kernels.load()
    ks, vs = rows.caches(layer)
    # bf16a's laid-out chunks (not for the row-by-row reference, which lays every chunk out afresh to compare with)
    store = () if _reference[0] else rows.panels(layer, pairs)
    scale = ks[0].shape[-1] ** -0.5
    call = (lambda i, j: k.attention_step(qkv[i:j], cos[i:j], sin[i:j], ks, vs, rows.seq[i:j], rows.slot[i:j],
                                          rows.ctx[i:j], rows.extra[i:j], rows.n_extra[i:j], heads, scale, CHUNK,
                                          pairs, *store))
    if _reference[0] and qkv.shape[0] > 1:   # rows in order: each needs only its own and earlier rows' keys
        return torch.cat([call(i, i + 1) for i in range(qkv.shape[0])])
    return call(0, qkv.shape[0])


def fused(x: torch.Tensor) -> bool:
    """Whether a decoding layer may run as one kernel call (`layer`): the kernels, fp32 activations, and not the
    row-by-row reference."""
    return not _reference[0] and x.dtype == torch.float32 and invariant(x)


def attend_dense(q: torch.Tensor, rows: Rows, layer: int) -> torch.Tensor:
    """q [R, H, d] (after RoPE; keys and values already cached) -> [R, H, d] fp32, with PyTorch's attention and a
    dense mask per segment: the same keys, not row-invariant (the fallback)."""
    ks, vs = rows.caches(layer)
    out, first = [], 0
    for k, v, (_, _, start, n) in zip(ks, vs, rows.segments):
        width = start + n
        visible = torch.arange(width)[None, :] < rows.ctx[first:first + n, None]             # [n, S]
        e = rows.extra[first:first + n]
        if e.shape[1]:
            valid = torch.arange(e.shape[1])[None, :] < rows.n_extra[first:first + n, None]
            visible.scatter_(1, e.clamp(max=width - 1), valid | visible.gather(1, e.clamp(max=width - 1)))
        mask = visible.to(q.device)[None, None]                                                # [1, 1, n, S]
        y = F.scaled_dot_product_attention(q[first:first + n].transpose(0, 1)[None], k[None, :, :width],
                                           v[None, :, :width], attn_mask=mask, scale=q.shape[-1] ** -0.5,
                                           enable_gqa=True)
        out.append(y[0].transpose(0, 1).float())
        first += n
    return torch.cat(out)
