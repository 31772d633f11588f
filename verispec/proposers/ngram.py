"""Prompt lookup (n-gram) proposer: no model at all.

Find the most recent earlier occurrence of the context's last n tokens (n from `max_ngram` down to `min_ngram`) and
propose the tokens that followed it. It pays off whenever the output quotes its input: summaries, edits, code.
The proposal is deterministic, so q is one-hot at each proposed token (the verifier treats `q=None` that way).
"""
from __future__ import annotations

import torch

from ..errors import VerispecError
from ..sampling import SamplingConfig
from .base import Proposal


class NgramProposer:
    name = "ngram"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        if not 1 <= min_ngram <= max_ngram:
            raise VerispecError(f"n-gram sizes must satisfy 1 <= min <= max, got {min_ngram}..{max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def prepare(self, capacity: int) -> None:
        pass

    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        return Proposal(lookup(context, k, self.max_ngram, self.min_ngram))


def lookup(context: list[int], k: int, max_ngram: int = 3, min_ngram: int = 1) -> list[int]:
    """Tokens that followed the latest earlier match of the longest matching suffix n-gram (at most k)."""
    ids = torch.tensor(context, dtype=torch.long)
    length = ids.numel()
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        windows = ids[:length - 1].unfold(0, n, 1)            # [length - n, n]: every n-gram but the suffix itself
        hits = (windows == ids[length - n:]).all(-1).nonzero()
        if hits.numel():
            start = int(hits[-1]) + n                        # continuation of the most recent match
            return ids[start:start + k].tolist()
    return []
