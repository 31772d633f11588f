"""The one protocol every proposer implements: guess up to k next tokens for a sequence.

A proposer returns its draft tokens and, where it has them, the probabilities q it drew them from. The verifier
needs nothing else. Proposers keep whatever state they like (a draft model keeps a KV cache) but must accept any
context: after a cycle the sequence may have diverged from what they drafted, and they resynchronise themselves.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from ..sampling import SamplingConfig


@dataclass(frozen=True)
class Proposal:
    tokens: list[int]                 # draft tokens x_1..x_k' (k' <= k, possibly 0)
    q: torch.Tensor | None = None     # [k', vocab] distributions x_i was drawn from; None: deterministic (one-hot)


@runtime_checkable
class Proposer(Protocol):
    name: str

    def prepare(self, capacity: int) -> None:
        """Called before each generation: sequences will hold at most `capacity` tokens."""

    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        """Guess up to k tokens following `context` (prompt + everything emitted so far)."""
