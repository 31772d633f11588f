"""Draft-model proposer: a smaller Llama-family model sharing the target's tokenizer drafts k tokens.

Each draft token x_i is drawn from the draft's own distribution q_i (same temperature / top-k / top-p as the
target), and q_i is returned with it so the verifier can apply min(1, p/q). The draft keeps its own KV cache and
resynchronises it with the sequence at every call: slots agreeing with the context are kept, the rest truncated.
"""
from __future__ import annotations

import torch

from ..model.llama import Llama
from ..sampling import SamplingConfig, probs, sample
from .base import Proposal


class DraftModelProposer:
    name = "draft"

    def __init__(self, model: Llama):
        self.model = model
        self.cache = None
        self.seen: list[int] = []   # tokens whose keys/values sit in self.cache, in order

    def prepare(self, capacity: int) -> None:
        if self.cache is None or self.cache.capacity < capacity:
            self.cache, self.seen = self.model.new_cache(capacity), []

    def _sync(self, context: list[int]) -> list[int]:
        """Drop cached slots that disagree with `context`; return the context tokens still to be fed."""
        keep = 0
        for a, b in zip(self.seen, context[:-1]):  # always re-feed the last token: its logits are needed
            if a != b:
                break
            keep += 1
        self.cache.truncate(keep)
        del self.seen[keep:]
        return context[keep:]

    @torch.inference_mode()
    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator) -> Proposal:
        feed = self._sync(context)
        device = self.model.device
        head_ids = self.model.head_ids if self.model.cfg.head_tokens else None
        tokens, qs = [], []
        for _ in range(k):
            start = self.cache.length
            x = torch.tensor([feed], device=device)                              # [1, n]
            pos = torch.arange(start, start + len(feed), device=device)[None]     # [1, n]
            hidden = self.model(x, pos, self.cache)                              # [1, n, D]
            self.seen.extend(feed)
            q = probs(self.model.logits(hidden[0, -1], full=False), sampling)     # [head] (= [vocab] if full)
            row = int(sample(q, torch.rand((), generator=generator).to(device)))
            tokens.append(row if head_ids is None else int(head_ids[row]))
            qs.append(q)
            feed = [tokens[-1]]
        if not qs:
            return Proposal([])
        q = torch.stack(qs)                                                       # [k, head]
        if head_ids is not None:  # a reduced head: q is 0 outside it (the verifier's residual covers the rest)
            q = q.new_zeros(len(qs), self.model.cfg.vocab_size).index_copy_(1, head_ids, q)
        return Proposal(tokens, q)
