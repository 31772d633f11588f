"""Chunked prefill: a joining sequence's prompt goes through the target a chunk at a time, one chunk between two
decoding steps, so a long prompt never stalls the running streams for more than one chunk.

The chunks before the last fill the sequence's KV cache (and feed the target's features to proposers that read
them, as `Sequence.prefill` does); the last goes through `Sequence.prefill` itself, which reuses the filled cache
as a known prefix, samples the first token and reports it. On the row-invariant kernels (`verispec doctor`) a
chunk's rows get the bits they get in one pass, so the cache, and every token after it, equal offline
decoding's; elsewhere its low bits (and so, rarely, a greedy tie) could differ."""
from __future__ import annotations

import torch

from ..engine import Sequence


class Prefill:
    def __init__(self, seq: Sequence, keep_features: bool = False):
        """keep_features: the sequence keeps the hidden states of every position it caches (`Sequence.features`),
        the prompt's and then its output's, for the prefix cache."""
        self.seq, self.done, self.cache = seq, 0, None    # done: prompt tokens whose keys/values are cached
        seq.features = [] if keep_features else None

    def reuse(self, k: torch.Tensor, v: torch.Tensor, features: torch.Tensor) -> None:
        """Start from a kept prefix of this prompt (serve.prefix): its keys and values k, v [layers, kv_heads, n,
        head_dim] and the target's final hidden states [n, D] at its positions, shown to a proposer that reads
        them as the chunks before would have been. On the row-invariant kernels these are the very bits this
        prompt's own prefill gives those positions (`tests/test_serve_prefix.py`)."""
        n = k.shape[2]
        if not 0 < n < len(self.seq.prompt) or self.done:
            raise ValueError(f"a kept prefix of {n} tokens cannot start a prompt of {len(self.seq.prompt)}")
        self._open()
        self.cache.load(k, v)
        self.seq.heard(features)
        self.done = n

    def _open(self) -> None:
        """Before the first chunk (or a kept prefix): the proposer prepared once, the sequence's cache made."""
        seq = self.seq
        if seq.proposer is not None:
            seq.proposer.prepare(seq.capacity)
        self.cache = seq.target.new_cache(seq.capacity)

    def prompt_features(self) -> torch.Tensor | None:
        """The target's final hidden states [len(prompt), D] at every prompt position, once prefilled (None: not
        kept)."""
        features = self.seq.features
        return None if features is None or self.remaining else torch.cat(features)[:len(self.seq.prompt)]

    @property
    def remaining(self) -> int:
        return len(self.seq.prompt) - self.done

    @torch.inference_mode()
    def advance(self, budget: int) -> int:
        """Prefill up to `budget` more prompt tokens (all of them if budget <= 0); returns how many it ran.
        The sequence is prefilled (its first token drawn) once `remaining` is 0."""
        seq, prompt = self.seq, self.seq.prompt
        if budget <= 0 or self.remaining <= budget:
            n = self.remaining
            if self.cache is None:
                seq.prefill()
            else:
                with prepared(seq.proposer):               # keep what the proposer observed of earlier chunks
                    seq.prefill(self.cache, prompt[:self.done])
            self.done = len(prompt)
            return n
        if self.cache is None:
            self._open()
        n = min(budget, len(prompt) - 1 - self.done)       # the last prompt token is left to Sequence.prefill
        device = seq.target.device
        tokens = torch.tensor([prompt[self.done:self.done + n]], device=device)              # [1, n]
        positions = torch.arange(self.done, self.done + n, device=device)[None]              # [1, n]
        hidden = seq.target(tokens, positions, self.cache)                                   # [1, n, D]
        seq.heard(hidden[0])
        self.done += n
        return n


class prepared:
    """Within this block the proposer's `prepare` does nothing (it was prepared before the first chunk)."""

    def __init__(self, proposer):
        self.proposer = proposer

    def __enter__(self):
        if self.proposer is not None:
            self.proposer.prepare = lambda capacity: None

    def __exit__(self, *exc):
        if self.proposer is not None:
            del self.proposer.prepare
