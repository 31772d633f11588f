"""Automatic k: each cycle, the draft length that maximises predicted speedup for this request.

The prediction is `theory.speedup(alpha, k, c, T)`: the cost curve T(n)/T(1) and the draft step cost c come from a
measured profile (`verispec profile`), alpha from a running estimate for the request at hand: a Beta prior centred
on the method's profiled alpha, updated after every cycle with the draft tokens checked and accepted, older cycles
fading geometrically so the estimate follows the text. When no k is predicted to win by more than MARGIN, k = 0
(plain decoding); every `probe_every` such cycles one k = 1 probe keeps the estimate alive.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .errors import VerispecError
from .theory import best_k, monotone_curve, speedup

DEFAULT_ALPHA = {"ngram": 0.45, "draft": 0.55}
# Speculate only where the formula predicts a gain above 10%: it does not see per-cycle overheads (sampling over
# the vocabulary at several positions, the draft's catch-up pass, Python), which cost a few percent of a step
# here. Without the margin, auto lost 9% on random-token prompts at T = 1.5 with the draft (alpha 0.26).
MARGIN = 0.10


@dataclass
class CostProfile:
    curve: dict[int, float] = field(default_factory=lambda: {n: 1 + 0.045 * (n - 1) for n in range(1, 17)})
    draft_cost: dict[str, float] = field(default_factory=lambda: {"ngram": 0.002, "draft": 0.07})
    alpha: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ALPHA))
    measured: bool = False     # False: the built-in defaults (a bf16 CPU profile of the default model)
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        self.curve = monotone_curve(self.curve)

    @classmethod
    def load(cls, path: str | Path) -> "CostProfile":
        try:
            d = json.loads(Path(path).read_text())
            return cls({int(n): float(v) for n, v in d["curve"].items()}, d["draft_cost"], d["alpha"],
                       d.get("measured", True), d.get("meta", {}))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise VerispecError(f"cannot read profile {path}: {e}") from None

    def save(self, path: str | Path) -> None:
        from .files import atomic_file
        with atomic_file(path) as f:
            json.dump({**asdict(self), "curve": {str(n): v for n, v in self.curve.items()}}, f, indent=1)

    def chooser(self, method: str, k_max: int = 12) -> "AutoK":
        return AutoK(self.draft_cost.get(method, 0.05), self.curve, self.alpha.get(method, 0.5), k_max=k_max)


class AutoK:
    def __init__(self, c: float, curve: dict[int, float], prior_alpha: float, prior_weight: float = 4.0,
                 forget: float = 0.9, k_max: int = 12, probe_every: int = 8, margin: float = MARGIN):
        self.c, self.curve, self.k_max, self.forget, self.probe_every = c, curve, k_max, forget, probe_every
        self.margin = margin
        self.accepted = prior_alpha * prior_weight
        self.rejected = (1 - prior_alpha) * prior_weight
        self.idle = 0

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def next_k(self) -> int:
        k = best_k(self.alpha, self.c, self.curve, self.k_max)
        if k and speedup(self.alpha, k, self.c, self.curve) < 1 + self.margin:
            k = 0
        if k == 0:
            self.idle += 1
            if self.idle >= self.probe_every:
                self.idle = 0
                return 1
        return k

    def update(self, checked: int, accepted: int) -> None:
        if checked == 0:
            return
        self.accepted = self.forget * self.accepted + accepted
        self.rejected = self.forget * self.rejected + (checked - accepted)
