"""The training commands' progress bar: one tick per step with the loss, held-out figures after evaluations."""
from __future__ import annotations

import sys


class StepBar:
    def __init__(self, total: int, initial: int, desc: str):
        from tqdm import tqdm
        self.bar = tqdm(total=total, initial=initial, desc=desc, unit="step", file=sys.stderr)
        self.shown: dict[str, str] = {}

    def step(self, loss: float) -> None:
        self.shown["loss"] = f"{loss:.3f}"
        self.bar.update(1)
        self.bar.set_postfix(self.shown)

    def show(self, **figures: str) -> None:
        self.shown.update(figures)
        self.bar.set_postfix(self.shown)

    def close(self) -> None:
        self.bar.close()
