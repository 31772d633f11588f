"""Decoder layers in one kernel call each (`layer`, `qlayer`), or all of a model's layers in one (`stack`).

Each runs the op-by-op path's very kernel calls in its order (kernels/cpu.cpp `layer`, kernels/qlayer.cpp,
kernels/stack.cpp), so the same bits; what they save is the trips through Python between the calls. Their
arguments (the weights' kernel layouts, widths, shapes) are built once, and rebuilt when a parameter is replaced or
changes in place, a layer's module is replaced, or a product's quantized parts are replaced.
"""
from __future__ import annotations

from operator import attrgetter, is_

import torch
from torch import nn
from torch.nn.modules import module as torch_module

from .. import kernels
from .ops import CHUNK, RMSNorm, Rows, _has_version, _version, invariant


def _products(block) -> tuple:
    return block.attn.wqkv, block.attn.wo, block.mlp.w13, block.mlp.w2


def kind(block) -> str | None:
    """'float' or 'quant' where a decoder layer can run as one kernel call (RMSNorm norms; its four products all
    unquantized, or all quantized alike); None otherwise (EAGLE-1's layout, a mixed layer)."""
    try:
        if not isinstance(block.attn_norm, RMSNorm) or not isinstance(block.mlp_norm, RMSNorm):
            return None
        products = _products(block)
    except AttributeError:                                       # not a decoder layer of this model's kind
        return None
    if all(p.quant is None for p in products):
        return "float"
    if all(p.quant is not None and p.int8 == products[0].int8 for p in products):
        return "quant"
    return None


def _shape(block) -> tuple:
    """The layer call's heads, RMSNorm eps and attention scale."""
    return block.attn.h, block.attn_norm.eps, block.attn.d ** -0.5


def _norms32(block) -> list:
    return [block.attn_norm.weight32(), block.mlp_norm.weight32()]


def _watch(mods) -> list:
    """(parameter dict, name, tensor) of each parameter of `mods`: what a cached argument list was built from."""
    return [(mod._parameters, name, mod._parameters[name]) for mod in mods for name in ("weight", "bias")
            if mod._parameters.get(name) is not None]


def _slots(block) -> list:
    """(module dict, name, module) of a decoder layer's parts: a part replaced after a pass must be seen."""
    a, m = block.attn, block.mlp
    return [(block._modules, n, block._modules[n]) for n in ("attn_norm", "attn", "mlp_norm", "mlp")] + [
        (a._modules, "wqkv", a.wqkv), (a._modules, "wo", a.wo), (m._modules, "w13", m.w13), (m._modules, "w2", m.w2)]


_PTR, _SHAPE, _DTYPE, _VERSION = torch.Tensor.data_ptr, attrgetter("shape"), attrgetter("dtype"), attrgetter("_version")


class _Watched:
    """Objects held in dicts (parameters in their modules' `_parameters`, modules in their parents' `_modules`, a
    product's quantized parts in its `__dict__`) and what each tensor among them was: its storage, shape, in-place
    version and dtype, and (last) the float product's instruction set, which decides bf16 panels' layout
    (`ops.amx_layout`). Every forward pass asks `unchanged`, so it runs as C-level maps over tuples, the tensors
    compared in one kernel call (`Watch`; builds from before it compare them here)."""

    def __init__(self, entries: list):
        entries = list({(id(d), n, id(o)): (d, n, o) for d, n, o in entries}.values())   # each entry once
        self.dicts, self.names, self.objs = (tuple(c) for c in zip(*entries)) if entries else ((), (), ())
        self.tensors = tuple(o for o in self.objs if isinstance(o, torch.Tensor))
        self.versioned = tuple(t for t in self.tensors if _has_version(t))   # true inference tensors have none
        native = getattr(kernels.load(), "Watch", None)
        self.native = None if native is None else native(list(self.tensors))
        self.stamp = self._stamp()

    def __reduce__(self):               # a copy or a pickle watches its own copies (`Watch` neither copies nor
        return _Watched, (list(zip(self.dicts, self.names, self.objs)),)               # pickles)

    def _stamp(self) -> tuple:
        if self.native is not None:
            return (kernels.load().fp_isa(),)
        return (tuple(map(_PTR, self.tensors)), tuple(map(_SHAPE, self.tensors)), tuple(map(_VERSION, self.versioned)),
                tuple(map(_DTYPE, self.tensors)), kernels.load().fp_isa())

    def unchanged(self) -> bool:
        try:
            return all(map(is_, map(dict.get, self.dicts, self.names), self.objs)) and self._stamp() == self.stamp \
                and (self.native is None or self.native.unchanged())
        except RuntimeError:   # a counted tensor's `.data` became a true inference tensor (no counter): rebuild
            return False


class _Fused:
    """A block's arguments for one `layer` call (its weights' kernel layouts, widths, shapes)."""

    def __init__(self, block):
        a, m = block.attn, block.mlp
        self.watch = _slots(block) + _watch((block.attn_norm, a.wqkv, a.wo, block.mlp_norm, m.w13, m.w2)) + \
            [(vars(lin), "act_bf16", lin.act_bf16) for lin in (a.wqkv, a.wo, m.w13, m.w2)]   # decides the layout
        self.watched = _Watched(self.watch)
        (wqkv, bqkv), (wo, _), (w13, _), (w2, _) = a.wqkv.panels(), a.wo.panels(), m.w13.panels(), m.w2.panels()
        self.params = [block.attn_norm.weight32(), wqkv, torch.empty(0) if bqkv is None else bqkv, wo,
                       block.mlp_norm.weight32(), w13, w2]
        self.widths = [a.wqkv.out_features, a.wo.out_features, m.w13.out_features, m.w2.out_features]
        self.shape = _shape(block)

    def valid(self) -> bool:
        return self.watched.unchanged()


def _fused(block) -> _Fused:
    f = block.__dict__.get("_fused")
    if f is None or not f.valid():
        f = block.__dict__["_fused"] = _Fused(block)
    return f


def _quant_key(block) -> tuple:
    bias = block.attn.wqkv.bias
    stamp = None if bias is None else (id(bias), bias.data_ptr(), _version(bias), bias.dtype)
    return tuple(id(lin.quant) for lin in _products(block)) + (block.attn.wqkv.int8, stamp)


def _quant_args(block) -> tuple:
    """`qlayer`'s arguments for a block's packed parts (bias, arrays, part counts, kinds, widths, int8), built once
    per set of parts."""
    from .quant import TYPES
    key, cached = _quant_key(block), block.__dict__.get("_qlayer")
    if cached is None or cached[0] != key:
        a, products = block.attn, _products(block)
        parts = [p for lin in products for p in lin.quant]
        bqkv = torch.empty(0) if a.wqkv.bias is None else a.wqkv.bias.detach().float().contiguous()
        cached = block.__dict__["_qlayer"] = (key, (bqkv, [t for p in parts for t in (p.q, p.sc, p.mn, p.d, p.dmin)],
                                                     [len(lin.quant) for lin in products],
                                                     [TYPES[p.kind][2] for p in parts], [p.n for p in parts],
                                                     a.wqkv.int8))
    return cached[1]


def _flat(x: torch.Tensor, rope) -> tuple:
    b, t, d = x.shape
    cos, sin = (r.reshape(b * t, -1) for r in rope)
    return x.reshape(b * t, d), cos, sin


def layer(block, x: torch.Tensor, rope, rows: Rows, index: int) -> torch.Tensor:
    """block (a decoder layer: attn_norm, attn.wqkv, attn.wo, mlp_norm, mlp.w13, mlp.w2) over x [batch, n, D]
    fp32 in one kernel call: the op-by-op path's very calls, so the same bits."""
    f = _fused(block)
    flat, cos, sin = _flat(x, rope)
    ks, vs = rows.caches(index)
    heads, eps, scale = f.shape
    y = kernels.load().layer(flat, f.params, f.widths, cos, sin, ks, vs, rows.seq, rows.slot, rows.ctx, rows.extra,
                             rows.n_extra, heads, eps, scale, CHUNK, *rows.panels(index, block.attn.wqkv.act_bf16))
    return y.view(x.shape)


def qlayer(block, x: torch.Tensor, rope, rows: Rows, index: int) -> torch.Tensor:
    """`layer` for a block whose four products are GGUF-quantized (`Linear.quant`, --dtype gguf / gguf-q8): the
    op-by-op path's kernel calls in one call (`kernels/qlayer.cpp`), so the same bits."""
    flat, cos, sin = _flat(x, rope)
    ks, vs = rows.caches(index)
    y = kernels.load().qlayer(flat, _norms32(block), *_quant_args(block), cos, sin, ks, vs, rows.seq, rows.slot,
                              rows.ctx, rows.extra, rows.n_extra, *_shape(block), CHUNK, *rows.panels(index, False))
    return y.view(x.shape)


class _Stack:
    """The kernels' `Stack` over a model's decoder layers, and what it was built from: the layer modules (held in
    their parents), their parameters and their quantized parts."""

    def __init__(self, blocks: nn.ModuleList, norm: RMSNorm | None):
        self.kernel, self.size, self.norm = kernels.load().Stack(), len(blocks), norm
        self.pairs = any(b.attn.wqkv.act_bf16 for b in blocks)         # bf16a's attention (watched below)
        watch = [(blocks._modules, name, b) for name, b in blocks._modules.items()]
        if norm is not None:                                            # the final norm, run in the same call
            self.kernel.set_norm(norm.weight32(), norm.eps)
            watch += _watch((norm,)) + [(vars(norm), "eps", norm.eps)]
        for block in blocks:
            a = block.attn
            if kind(block) == "float":
                f = _fused(block)
                self.kernel.add_float(f.params, f.widths, *f.shape)
                watch += f.watch
            else:
                self.kernel.add_quant(_norms32(block), *_quant_args(block), *_shape(block))
                watch += _slots(block) + _watch((block.attn_norm, block.mlp_norm, a.wqkv))
            # each product's quantized parts (float ones: None) and whether they multiply in 8 bits, as attributes
            watch += [(vars(lin), name, vars(lin)[name]) for lin in _products(block)
                      for name in ("quant", "int8", "act_bf16")]
        self.watched = _Watched(watch)

    def valid(self, blocks: nn.ModuleList, norm: RMSNorm | None) -> bool:
        return len(blocks) == self.size and norm is self.norm and self.watched.unchanged()

    def __reduce__(self):               # the kernel object neither copies nor pickles: a copy builds its own
        return _nothing, ()

    def __deepcopy__(self, memo):
        return None


def _nothing() -> None:
    return None


def _hooked(blocks: nn.ModuleList) -> bool:
    """Whether a forward hook would see a layer (training taps features layer by layer): then layers run one by one."""
    return bool(torch_module._global_forward_hooks or torch_module._global_forward_pre_hooks or
                any(b._forward_hooks or b._forward_pre_hooks for b in blocks))


def _native_norm(final) -> RMSNorm | None:
    """`final` where the kernels can run it as its own forward would (an RMSNorm as it is, unhooked), else None."""
    if type(final) is not RMSNorm or "forward" in final.__dict__ or final._forward_hooks or \
            final._forward_pre_hooks or not invariant(final.weight) or final.weight.shape[-1] % 8:
        return None
    return final


def stack(blocks: nn.ModuleList, layer_type: type, x: torch.Tensor, rope, rows: Rows,
          final: nn.Module | None = None) -> torch.Tensor | None:
    """All of `blocks` over x [batch, n, D] fp32 in one kernel call (`kernels/stack.cpp`), then `final` (the
    model's final norm, if given): each block's `layer` or `qlayer` call, in order, and the norm's `rms_norm` in the
    same call where it is a plain RMSNorm, so the same bits. None where that cannot be: a block not exactly a
    `layer_type` with its class's own forward, not a plain decoder layer (`kind`), or hooked. -> [batch, n, D] fp32."""
    if not len(blocks) or _hooked(blocks) or any(type(b) is not layer_type or "forward" in b.__dict__
                                                 for b in blocks):
        return None
    norm = _native_norm(final) if hasattr(kernels.load().Stack, "set_norm") else None   # (builds from before it)
    s = blocks.__dict__.get("_stack")
    if s is None or not s.valid(blocks, norm):
        if not all(kind(b) for b in blocks):
            return None
        s = blocks.__dict__["_stack"] = _Stack(blocks, norm)
    flat, cos, sin = _flat(x, rope)
    segments = rows.segments
    y = s.kernel.run(flat, cos, sin, [c.k for c, *_ in segments], [c.v for c, *_ in segments],
                     [b for _, b, *_ in segments], rows.seq, rows.slot, rows.ctx, rows.extra, rows.n_extra, CHUNK,
                     *rows.stores(s.pairs)).view(x.shape)
    return y if final is None or norm is not None else final(y)
