"""The speculative-decoding cost model, as plain functions.

With per-token acceptance alpha (independent across positions), k draft tokens per cycle, a draft step costing c
target passes, and a target pass over n tokens costing T(n):
- expected tokens per cycle      E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha)      (k + 1 when alpha = 1)
- cycle cost, in target passes   k * c + T(k+1) / T(1)
- speedup over plain decoding    S = E / (k * c + T(k+1) / T(1))
With free verification (T(k+1) = T(1)) this is the textbook (1 - alpha^(k+1)) / ((1 - alpha)(1 + k c)).
k = 0 is plain decoding: S = 1.
"""
from __future__ import annotations

from typing import Callable, Mapping


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens emitted per cycle: accepted drafts plus the recovered or bonus token."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if alpha == 1:
        return k + 1.0
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def cost_ratio(curve: Mapping[int, float] | Callable[[int], float] | None, n: int) -> float:
    """T(n)/T(1) from a measured curve (dict n -> ratio, extrapolated linearly past its end) or free (None)."""
    if curve is None:
        return 1.0
    if callable(curve):
        return curve(n)
    if n in curve:
        return curve[n]
    top = max(curve)
    slope = (curve[top] - curve[1]) / (top - 1) if top > 1 else 0.0
    return curve[top] + slope * (n - top)


def speedup(alpha: float, k: int, c: float, curve=None) -> float:
    """Predicted speedup of k-token speculation over plain decoding (k = 0 gives 1)."""
    if k == 0:
        return 1.0
    return expected_tokens(alpha, k) / (k * c + cost_ratio(curve, k + 1))


def best_k(alpha: float, c: float, curve=None, k_max: int = 16) -> int:
    """The k in 0..k_max with the highest predicted speedup (0: do not speculate)."""
    return max(range(k_max + 1), key=lambda k: (speedup(alpha, k, c, curve), -k))


def truncated_geometric(alpha: float, k: int) -> list[float]:
    """P(exactly n of k drafts accepted), n = 0..k, if each is accepted independently with probability alpha."""
    return [alpha ** n * (1 - alpha) for n in range(k)] + [alpha ** k]


def monotone_curve(curve: Mapping[int, float]) -> dict[int, float]:
    """A measured cost curve made physical: T(n)/T(1) >= 1 and non-decreasing in n. Timing noise on a shared
    machine can put T(2) below T(1); left as is, that would tell the k chooser verification is cheaper than
    decoding, and it would never fall back to plain decoding."""
    out, top = {}, 1.0
    for n in sorted(curve):
        top = max(top, float(curve[n]))
        out[n] = top
    return out
