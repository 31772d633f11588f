"""GGUF-quantized weights, multiplied without dequantizing them first, bit for bit as their fp32 dequantization.

A GGUF tensor stores, per output row, quantization blocks over the input dimension K. For the types here the fp32
weight gguf-py's `gguf.quants.dequantize` makes is one exact fp32 formula of small integers and fp16 scales:

    Q8_0  w = d * q                       d fp16 per 32 k, q int8
    Q5_0  w = d * (q - 16)                d fp16 per 32 k, q 5-bit
    Q6_K  w = (d * sc) * (q - 32)         d fp16 per 256 k, sc int8 per 16 k, q 6-bit (d * sc is exact; one rounding)
    Q4_K  w = (d * sc) * q - dmin * m     d, dmin fp16 per 256 k; sc, m 6-bit per 32 k; q 4-bit
                                          (d * sc, its product with q and dmin * m are exact: one rounding, the -)
    Q4_1  w = d * q + m                   d, m fp16 per 32 k; q 4-bit (d * q exact: one rounding, the +)

`pack` repacks the raw blocks at load time into the kernel's layout, panels of 16 outputs like `ops._panels`, so
the kernel (`quant.cpp`: `qlinear`) rebuilds 16 outputs' exact fp32 weights for one k from a few bytes and runs
the very FMA chains of the fp32 `linear` kernel on them. Hence `matmul(x, pack(raw))` equals
`linear(x, panels(dequantize(raw)))` bit for bit, for any number of rows. Bytes read per weight: Q4_K 4.6 bits,
Q4_1 5, Q6_K 8.6, Q5_0 and Q8_0 8.5 (bf16: 16).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .. import kernels
from ..errors import VerispecError

QK_K = 256
# type -> (weights per block, bytes per block, kernel type code)
TYPES = {"Q8_0": (32, 34, 0), "Q5_0": (32, 22, 1), "Q6_K": (256, 210, 2), "Q4_K": (256, 144, 3), "Q4_1": (32, 20, 4)}
NIBBLES = ("Q4_K", "Q4_1")      # 4-bit kinds: 8 k per 32-bit word
_EMPTY = torch.empty(0, dtype=torch.uint8)


@dataclass(frozen=True)
class Packed:
    """One quantized weight [N, K] in the kernel's layout (P = ceil(N / 16) panels of 16 outputs; padding is 0).

    q     Q4_K, Q4_1: uint8 [P, K/8, 16, 4]: per 8 k and output, one little-endian 32-bit word of 8 nibbles, k ascending
          from bit 0; others int8 [P, K/4, 16, 4]: per 4 k and output, 4 bytes, k ascending (q - 16, q - 32 or q:
          the signed integer the formula multiplies). So the kernel unpacks with shifts and masks, no shuffles.
    sc    Q4_K uint8 [P, K/32, 16]; Q6_K int8 [P, K/16, 16]; else empty
    mn    Q4_K uint8 [P, K/32, 16] (the mins m); else empty
    d     fp16 [P, K/256, 16] (K quants) or [P, K/32, 16] (Q8_0, Q5_0, Q4_1)
    dmin  Q4_K fp16 [P, K/256, 16]; Q4_1 fp16 [P, K/32, 16] (its offsets m); else empty
    """
    kind: str
    n: int
    k: int
    q: torch.Tensor
    sc: torch.Tensor
    mn: torch.Tensor
    d: torch.Tensor
    dmin: torch.Tensor

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.q, self.sc, self.mn, self.d, self.dmin))


def _f16(b: torch.Tensor) -> torch.Tensor:
    """[..., 2] uint8 -> [...] fp16 (little-endian, as GGUF stores it)."""
    return b.contiguous().view(torch.float16)[..., 0]


def _shifted(b: torch.Tensor, shifts: list[int]) -> torch.Tensor:
    """uint8 [..., 1, m] -> [..., len(shifts), m]: b >> s for each shift s."""
    return b >> torch.tensor(shifts, dtype=torch.uint8).reshape(len(shifts), 1)


def _unpack(blocks: torch.Tensor, kind: str) -> dict[str, torch.Tensor]:
    """blocks [B, bytes per block] uint8 -> per-block fields, following gguf-py's dequantize_blocks (in torch, whose
    integer operations run on every core). q [B, block] int8 (or uint8 for Q4_K, Q4_1), scales [B, groups], d /
    dmin [B]."""
    B = blocks.shape[0]
    if kind == "Q4_1":      # d, m, 16 bytes: k 0-15 in the low nibbles, 16-31 in the high ones
        qs = blocks[:, 4:20]
        return {"q": torch.cat([qs & 0x0F, qs >> 4], 1), "d": _f16(blocks[:, :2]), "dmin": _f16(blocks[:, 2:4])}
    if kind == "Q8_0":
        return {"q": blocks[:, 2:].contiguous().view(torch.int8), "d": _f16(blocks[:, :2])}
    if kind == "Q5_0":
        qh = blocks[:, 2:6].contiguous().view(torch.int32).long() & 0xFFFFFFFF                 # [B, 1]
        hi = ((qh >> torch.arange(32)) & 1).to(torch.uint8)                                     # [B, 32]
        qs = blocks[:, 6:22]
        lo = torch.cat([qs & 0x0F, qs >> 4], 1)                                                 # [B, 32]
        return {"q": (lo | (hi << 4)).view(torch.int8) - 16, "d": _f16(blocks[:, :2])}
    if kind == "Q6_K":
        ql, qh = blocks[:, :128], blocks[:, 128:192]
        lo = _shifted(ql.reshape(B, 2, 1, 64), [0, 4]) & 0x0F                                  # [B, 2, 2, 64]
        hi = _shifted(qh.reshape(B, 2, 1, 32), [0, 2, 4, 6]) & 0x03                            # [B, 2, 4, 32]
        q = (lo.reshape(B, 8, 32) | (hi.reshape(B, 8, 32) << 4)).view(torch.int8) - 32
        return {"q": q.reshape(B, QK_K), "sc": blocks[:, 192:208].contiguous().view(torch.int8),
                "d": _f16(blocks[:, 208:210])}
    # Q4_K: d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
    s = blocks[:, 4:16].reshape(B, 3, 4)
    dd, mm, md = s[:, 0], s[:, 1], s[:, 2]
    sc = torch.cat([dd & 0x3F, (md & 0x0F) | ((dd >> 2) & 0x30)], 1)                          # [B, 8]
    mn = torch.cat([mm & 0x3F, (md >> 4) | ((mm >> 2) & 0x30)], 1)                            # [B, 8]
    q = _shifted(blocks[:, 16:].reshape(B, 4, 1, 32), [0, 4]) & 0x0F                           # [B, 4, 2, 32]
    return {"q": q.reshape(B, QK_K), "sc": sc, "mn": mn, "d": _f16(blocks[:, :2]), "dmin": _f16(blocks[:, 2:4])}


def _panels(a: torch.Tensor, n: int) -> torch.Tensor:
    """[N, G] per-output values -> [ceil(N/16), G, 16] (zero padding), the kernel's panel layout."""
    t = a.reshape(n, -1)
    pad = -n % 16
    if pad:
        t = torch.cat([t, t.new_zeros(pad, t.shape[1])])
    return t.view(-1, 16, t.shape[1]).transpose(1, 2).contiguous()


def pack(raw: np.ndarray | torch.Tensor, kind: str, n: int, k: int, rows_per_chunk: int = 4096) -> Packed:
    """raw GGUF blocks (uint8, N rows of K / block weights each, as `GGUFReader` gives `t.data`) -> Packed."""
    if kind not in TYPES:
        raise VerispecError(f"quantized type {kind} is not supported (supported: {', '.join(TYPES)})")
    block, size, _ = TYPES[kind]
    raw = raw.numpy() if isinstance(raw, torch.Tensor) else np.asarray(raw)
    if k % block or raw.size != n * (k // block) * size:
        raise VerispecError(f"{kind} weight [{n}, {k}]: expected {n * (k // block) * size} bytes, got {raw.size}")
    raw = raw.reshape(n, (k // block) * size).view(np.uint8)
    parts = []
    for r0 in range(0, n, rows_per_chunk):     # chunks of whole panels keep the temporaries small
        rows = torch.from_numpy(np.array(raw[r0:r0 + rows_per_chunk]))         # a copy: the file's pages are read-only
        f = _unpack(rows.reshape(-1, size), kind)
        fields = {name: _panels(v, rows.shape[0]) for name, v in f.items()}
        fields["q"] = _words(fields["q"], kind)
        parts.append(fields)
    cat = {name: torch.cat([p[name] for p in parts]) for name in parts[0]}
    return Packed(kind, n, k, cat["q"], cat.get("sc", _EMPTY), cat.get("mn", _EMPTY), cat["d"],
                  cat.get("dmin", _EMPTY))


def q4_1(w: torch.Tensor) -> Packed:
    """A float matrix [N, K] (K a multiple of 32) -> Q4_1 blocks in the kernel's layout: per 32 k of a row, m =
    the fp16 minimum, d = the fp16 (max - min) / 15, q = round((w - m) / d) in 0..15. A lossy requantization,
    for proposers (`requant`): about 5 bits a weight."""
    n, k = w.shape
    if k % 32:
        raise VerispecError(f"Q4_1 needs K a multiple of 32, got [{n}, {k}]")
    b = w.detach().float().cpu().reshape(n, k // 32, 32)
    lo, hi = b.amin(-1), b.amax(-1)                                                  # [N, K/32]
    d, m = ((hi - lo) / 15).half(), lo.half()
    inv = torch.where(d.float() > 0, 1 / d.float(), torch.zeros_like(lo))
    q = torch.round((b - m.float()[..., None]) * inv[..., None]).clamp(0, 15).to(torch.uint8).reshape(n, k)
    return Packed("Q4_1", n, k, _words(_panels(q, n), "Q4_1"), _EMPTY, _EMPTY, _panels(d, n), _panels(m, n))


def merge(parts: list[Packed]) -> list[Packed]:
    """Weights stacked along the outputs (q, k and v; gate and up) -> as few Packed as give the same product: runs
    of one kind are joined panel by panel (every part but a run's last a whole number of panels, so the padding
    stays at the end). Each output's arithmetic is its panel's alone, so the bits are unchanged: one kernel call
    instead of several."""
    out = [parts[0]]
    for p in parts[1:]:
        last = out[-1]
        if p.kind != last.kind or p.k != last.k or last.n % 16:
            out.append(p)
            continue
        cat = lambda a, b: torch.cat([a, b]) if a.numel() else a
        out[-1] = Packed(p.kind, last.n + p.n, p.k, cat(last.q, p.q), cat(last.sc, p.sc), cat(last.mn, p.mn),
                         cat(last.d, p.d), cat(last.dmin, p.dmin))
    return out


def _words(q: torch.Tensor, kind: str) -> torch.Tensor:
    """q [P, K, 16] -> the kernel's [P, K/U, 16, 4]: each output's next U k in one 32-bit word (U = 8 nibbles or
    4 bytes)."""
    P, K, _ = q.shape
    if kind not in NIBBLES:
        return q.view(P, K // 4, 4, 16).transpose(2, 3).contiguous()
    q = q.view(P, K // 8, 8, 16)
    return (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).transpose(2, 3).contiguous()         # byte i: k 2i | 2i+1 << 4


def _unwords(q: torch.Tensor, kind: str) -> torch.Tensor:
    """The kernel's q layout -> [P, K, 16] integers (the inverse of `_words`)."""
    P, C = q.shape[:2]
    if kind not in NIBBLES:
        return q.transpose(2, 3).reshape(P, C * 4, 16)
    q = torch.stack([q & 0x0F, q >> 4], dim=-1).view(P, C, 16, 8)                       # [P, K/8, 16, 8]
    return q.transpose(2, 3).reshape(P, C * 8, 16)


def _per_k(t: torch.Tensor, k: int) -> torch.Tensor:
    """[P, G, 16] per-group values -> [P, k, 16], each group's value repeated over its k."""
    return t.repeat_interleave(k // t.shape[1], dim=1)


def _scales(p: Packed) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each scale group's fp32 scale s and offset o [P, K/G, 16] (G = 32 k; Q6_K 16), exact, so w = s * q (+ o):
    Q4_K s = d * sc, o = -(dmin * m); Q6_K s = d * sc; Q4_1 s = d, o = m; Q8_0, Q5_0 s = d (o None). The kernels'
    twin is `group_scales` (kernels/qweight.h)."""
    if p.kind == "Q4_K":
        return _per_k(p.d.float(), p.k // 32) * p.sc.float(), -(_per_k(p.dmin.float(), p.k // 32) * p.mn.float())
    if p.kind == "Q6_K":
        return _per_k(p.d.float(), p.k // 16) * p.sc.float(), None
    return p.d.float(), p.dmin.float() if p.kind == "Q4_1" else None


def dequantize(p: Packed) -> torch.Tensor:
    """The fp32 weight [N, K], equal bit for bit to gguf-py's dequantize of the raw blocks (no kernels needed):
    s * q rounds once where it is not exact, and + o (Q4_K's - dmin * m) once more, as numpy's formulas do."""
    q = _unwords(p.q, p.kind).float()                                                           # [P, K, 16]
    s, o = _scales(p)
    w = _per_k(s, p.k) * q
    if o is not None:
        w = w + _per_k(o, p.k)
    return w.transpose(1, 2).reshape(-1, p.k)[:p.n].contiguous()                               # [N, K]


def dequantize_raw(raw: np.ndarray, kind: str, n: int, k: int, rows: int = 8192) -> torch.Tensor:
    """Raw GGUF blocks of a [N, K] weight of a type in TYPES -> its fp32 weight [N, K], `rows` rows at a time: the
    bits of gguf-py's dequantize (`dequantize`), about 5x faster on a 151,936-row embedding."""
    raw = np.asarray(raw).reshape(n, -1)
    out = torch.empty(n, k)
    for r0 in range(0, n, rows):
        part = raw[r0:r0 + rows]
        out[r0:r0 + len(part)] = dequantize(pack(part, kind, len(part), k))
    return out


def embed(p: Packed, ids: torch.Tensor) -> torch.Tensor:
    """Rows `ids` [T] of the fp32 weight -> [T, K] (an embedding lookup), bit for bit `dequantize(p)[ids]`,
    dequantizing only the panels they sit in."""
    ids = ids.reshape(-1).long()
    panels, where = torch.unique(ids // 16, return_inverse=True)                                # [U], [T]
    pick = lambda t: t[panels] if t.numel() else t
    sub = Packed(p.kind, 16 * len(panels), p.k, pick(p.q), pick(p.sc), pick(p.mn), pick(p.d), pick(p.dmin))
    return dequantize(sub)[where * 16 + ids % 16]                                              # [T, K]


def quantize_activations(x: torch.Tensor, group: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [M, K] fp32 -> (xq [M, K] int8-valued, dx [M, K/32], bs [M, K/group] sums of xq): `--dtype gguf-q8`'s
    activations, each block of 32 k of a row on its own: dx = amax / 127, xq = round(x * 127 / amax) (ties to even)."""
    M, K = x.shape
    v = x.float().view(M, K // 32, 32)
    amax = v.abs().amax(-1, keepdim=True)                                                     # [M, K/32, 1]
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    xq = torch.round(v * inv).clamp(-127, 127).view(M, K)
    return xq, (amax / 127.0).view(M, K // 32), xq.view(M, K // group, group).sum(-1)


def matmul_q8_reference(x: torch.Tensor, p: Packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`matmul_q8` in PyTorch, without the kernels: the same integers and the same fp32 operations in the same
    order, so the same bits (tested). For tests, and machines without the kernels (slow)."""
    group = 16 if p.kind == "Q6_K" else 32
    xq, dx, bs = quantize_activations(x.float().contiguous(), group)
    q = _unwords(p.q, p.kind).double()                                                        # [P, K, 16]
    s, o = _scales(p)                                                                         # [P, K/G, 16]
    q = q.transpose(1, 2).reshape(-1, p.k)[:, None]                                          # [N', 1, K]
    S = (xq.double()[None] * q).view(q.shape[0], -1, p.k // group, group).sum(-1).float()   # [N', M, K/G] exact
    s = s.transpose(1, 2).reshape(-1, p.k // group)[:, None]                                 # [N', 1, K/G]
    t = s * S                                                                                 # fp32 products
    if o is not None:
        t = t + o.transpose(1, 2).reshape(-1, p.k // group)[:, None] * bs[None].float()
    y = torch.zeros(t.shape[:2], dtype=torch.float32)                                         # [N', M]
    dxg = dx.repeat_interleave(32 // group, dim=1)[None]                                      # [1, M, K/G]
    for g in range(t.shape[-1]):
        y = y + dxg[..., g] * t[..., g]                                                       # g ascending
    y = y[:p.n].T.contiguous()                                                                # [M, N]
    return y if bias is None else y + bias.float()


def matmul_q8(x: torch.Tensor, p: Packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] -> [M, N] fp32 with 8-bit activations and exact integer dot products (`--dtype gguf-q8`, the
    `q8linear` kernel): row-invariant by construction. Without the kernels: `matmul_q8_reference`."""
    return _product("q8linear", lambda x, p, b: matmul_q8_reference(x.cpu(), p, b).to(x.device), x, p, bias)


def matmul(x: torch.Tensor, p: Packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] -> x @ W.T (+ bias) [M, N] fp32, row-invariant, W the weight's fp32 dequantization.
    On the kernels: equal bit for bit to `linear` on W's fp32 panels; elsewhere PyTorch on `dequantize(p)`."""
    return _product("qlinear", lambda x, p, b: torch.nn.functional.linear(x, dequantize(p).to(x.device), b),
                    x, p, bias)


def _product(kernel: str, fallback, x: torch.Tensor, p: Packed, bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] times p (+ bias) -> [M, N] fp32 by the kernel named `kernel`, or `fallback(x, p, bias)` where the
    kernels cannot run (not a CPU tensor, or not built here)."""
    x = x.float().contiguous()
    b = None if bias is None else bias.detach().float().contiguous()
    k = kernels.load() if x.device.type == "cpu" else None
    if k is None:
        return fallback(x, p, b)
    return getattr(k, kernel)(x, TYPES[p.kind][2], p.q, p.sc, p.mn, p.d, p.dmin, p.n, b)
