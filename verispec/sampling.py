"""From logits to the distribution a token is drawn from, and the draw itself.

`probs` applies temperature, top-k and top-p exactly as plain sampling does; the verifier uses the same function
for the target (p) and the draft (q), so speculative output follows the very distribution plain decoding samples
from. Temperature 0 means greedy: p is one-hot at the argmax, and the rejection rule then reduces to
"accept while the draft equals the argmax".

Draws take their randomness as tensors of uniforms, so every sampling function is pure and testable.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

from .errors import VerispecError


def is_int(x) -> bool:
    """An integer (numpy's too), not a bool."""
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def is_real(x) -> bool:
    """A real number (numpy's too), not a bool, a string or None."""
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


@dataclass(frozen=True)
class SamplingConfig:
    temperature: float = 0.0   # 0 = greedy
    top_k: int = 0             # keep the k most likely tokens; 0 = off
    top_p: float = 1.0         # keep the smallest set of most likely tokens with mass >= top_p; 1 = off

    def __post_init__(self):
        for name, value, ok in (("temperature", self.temperature, is_real), ("top-p", self.top_p, is_real),
                                ("top-k", self.top_k, is_int)):
            if not ok(value):
                raise VerispecError(f"{name} must be {'an integer' if ok is is_int else 'a number'}, got {value!r}")
        if not 0 <= self.temperature < float("inf"):
            raise VerispecError(f"temperature must be >= 0 and finite, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise VerispecError(f"top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise VerispecError(f"top-k must be >= 0, got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def probs(logits: torch.Tensor, cfg: SamplingConfig) -> torch.Tensor:
    """[..., vocab] logits -> [..., vocab] float32 probabilities after temperature, top-k and top-p."""
    logits = logits.float()
    if cfg.greedy:
        return torch.zeros_like(logits).scatter_(-1, top_tokens(logits)[..., None], 1.0)
    if cfg.temperature < 1e-3:          # so small that logits / T could overflow float32: scaled from the max,
        # and by no less than float32's smallest normal: below it T itself rounds to 0 (0 / 0 at the max) or, on
        # CUDA, 1 / T to inf; float32 logits differ by far more than that, so p is the same one-hot either way
        logits = (logits - logits.amax(-1, keepdim=True)) / max(cfg.temperature, 1.2e-38)
    else:
        logits = logits / cfg.temperature
    if cfg.top_k and cfg.top_k < logits.shape[-1]:
        kth = logits.topk(cfg.top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    p = logits.softmax(-1)
    if cfg.top_p < 1:
        sorted_p, order = p.sort(dim=-1, descending=True, stable=True)   # ties in id order, whatever the rows
        mass_before = sorted_p.cumsum(-1) - sorted_p       # mass of strictly more likely tokens
        cut = (mass_before >= cfg.top_p) & (mass_before > 0)   # the most likely token stays, however small top_p
        drop = torch.empty_like(order, dtype=torch.bool).scatter_(-1, order, cut)
        p = p.masked_fill(drop, 0.0)                            # drop, mapped back from sorted to vocab order
        p = p / p.cumsum(-1)[..., -1:]              # a row's sum in one fixed order (`sum` splits a lone row
                                                    # across threads: other bits than the same row among others)
    return p


def top_tokens(logits: torch.Tensor) -> torch.Tensor:
    """[..., vocab] -> [...] int64: each row's argmax, the first of tied maxima (a NaN: the first NaN): the token
    greedy decoding picks. On the CPU kernels one pass per row (`argmax_rows`, 5x faster over a tree's rows than
    PyTorch); elsewhere `max(-1).indices`, which gives the same tokens."""
    from . import kernels
    k = kernels.load() if logits.device.type == "cpu" and logits.dtype == torch.float32 and logits.shape[-1] else None
    if k is None or not hasattr(k, "argmax_rows"):          # (builds from before it: scripts/kernels_ab.py)
        return logits.max(-1).indices
    return k.argmax_rows(logits.reshape(-1, logits.shape[-1]).contiguous()).view(logits.shape[:-1])


def sample(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw. weights: [..., vocab] non-negative, need not sum to 1; u: [...] in [0, 1). -> [...] ids.

    Token i is returned with probability weights[i] / sum(weights); zero-weight tokens are never returned.
    """
    cdf = weights.float().cumsum(-1)                            # [..., vocab]
    target = (u.float() * cdf[..., -1]).unsqueeze(-1)            # [..., 1]
    idx = torch.searchsorted(cdf, target, right=True).squeeze(-1)
    # rounding can put target at or past the last cumulative value: take the last token with weight instead
    last_nonzero = weights.shape[-1] - 1 - (weights.flip(-1) > 0).float().argmax(-1)
    return torch.minimum(idx, last_nonzero)
