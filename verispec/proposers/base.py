"""The one protocol every proposer implements: guess up to k next tokens for a sequence.

A proposer returns its draft tokens and, where it has them, the probabilities q it drew them from. The verifier
needs nothing else. Proposers keep whatever state they like (a draft model keeps a KV cache) but must accept any
context: after a cycle the sequence may have diverged from what they drafted, and they resynchronise themselves.

A proposer that drafts from the target's own features (Medusa) also defines `observe(hidden)`: after the prefill
and after every verification the engine passes it the target's final hidden states [m, D] of the positions it
kept; the last row is the state the newest token was drawn from. Tree proposers expose their `tree`.

A batch gives every sequence its own proposer: `fork(proposer)` shares the weights and starts the per-sequence
state afresh (a proposer with such state defines `fork`; a stateless one is simply copied).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from ..sampling import SamplingConfig
from ..tree import TokenTree


@dataclass(frozen=True)
class Proposal:
    """Draft tokens, as a chain (tree is None) or as the nodes of a token tree.

    Row j of q is the distribution drawn from at node j (node 0 is the newest emitted token): for a chain, the
    distribution token j + 1 was drawn from; for a tree, the one node j's children were drawn from, i.i.d.
    q None means the drafts are deterministic picks (q one-hot at each), as for n-gram or top-k choices.
    """
    tokens: list[int]                 # chain: x_1..x_k' (k' <= k, possibly 0); tree: node 1..n tokens
    q: torch.Tensor | None = None     # chain: [k', vocab]; tree: [1 + n, vocab]
    tree: TokenTree | None = None     # the tree the tokens fill, breadth-first (verispec.tree)


@runtime_checkable
class Proposer(Protocol):
    name: str

    def prepare(self, capacity: int) -> None:
        """Called before each generation: sequences will hold at most `capacity` tokens."""

    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        """Guess up to k tokens following `context` (prompt + everything emitted so far)."""


def fork(proposer: Proposer | None) -> Proposer | None:
    """A proposer for one more concurrent sequence: the same weights, its own per-sequence state."""
    if proposer is None:
        return None
    return proposer.fork() if hasattr(proposer, "fork") else copy.copy(proposer)


def widen(q: torch.Tensor, head_ids: torch.Tensor | None, vocab: int) -> torch.Tensor:
    """q [k, H] over a reduced output head's tokens `head_ids` -> [k, vocab], 0 outside the head (the verifier's
    residual norm(max(0, p - q)) then covers those tokens). No head_ids: q is already over the vocabulary."""
    if head_ids is None:
        return q
    return q.new_zeros(len(q), vocab).index_copy_(1, head_ids, q)
