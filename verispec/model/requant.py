"""Cheaper proposers: a draft model's or draft head's matrices requantized at load to 4 bits (Q4_1: per 32 k an
fp16 scale d and offset m, w = d * q + m with q in 0..15) and multiplied by `--dtype gguf-q8`'s integer product
(8-bit activations, exact int32 sums: row-invariant, like every product verispec runs).

A proposer's weights decide how often its guesses are accepted, never what is output: verification keeps the
target's tokens, and at T > 0 the accept rule is exact for whatever q the proposer drew from. Decoding one token is
bound by memory bandwidth, so 5 bits a weight instead of 8.5 (GGUF Q5_0, Q8_0) or 16 (bf16) makes a draft step
cheaper in proportion. `api.draft_weights` says where it is used (README, "Models")."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from . import quant
from .ops import Linear


def to_q4(module: nn.Module) -> int:
    """Every `ops.Linear` of `module` whose inputs are a multiple of 32 wide, to 4-bit weights and integer
    products: GGUF parts are requantized from their exact fp32 values (4-bit kinds, Q4_K and Q4_1, stay), float
    weights from theirs (then kept only as a shape). Returns the bytes of weights saved."""
    saved = 0
    for linear in [m for m in module.modules() if isinstance(m, Linear) and m.in_features % 32 == 0]:
        if linear.quant is not None:
            before = sum(p.nbytes() for p in linear.quant)
            parts = [p if p.kind in quant.NIBBLES else quant.q4_1(quant.dequantize(p)) for p in linear.quant]
        else:
            w = linear.weight
            before = w.numel() * w.element_size()
            parts = [quant.q4_1(w)]
            linear.weight = nn.Parameter(torch.empty(w.shape, device="meta"), requires_grad=False)
        linear.quant, linear.int8 = quant.merge(parts), True
        saved += before - sum(p.nbytes() for p in linear.quant)
    return saved


def product(weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """`ops.product` with 4-bit weights: x [..., K] -> x @ W.T [..., N] fp32, W `weight` [N, K] requantized."""
    packed = quant.q4_1(weight)
    return lambda x: quant.matmul_q8(x.reshape(-1, x.shape[-1]), packed).view(*x.shape[:-1], packed.n)
