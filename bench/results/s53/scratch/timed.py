"""A target model wrapped so that each forward pass calls on_pass(tokens, seconds) (scratch scripts)."""
import time

import torch


class Timed(torch.nn.Module):
    def __init__(self, m, on_pass):
        super().__init__()
        self.m, self.on_pass = m, on_pass

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.m, name)

    def forward(self, tokens, *a, **k):
        t0 = time.perf_counter()
        h = self.m(tokens, *a, **k)
        self.on_pass(tokens, time.perf_counter() - t0)
        return h
