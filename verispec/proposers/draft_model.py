"""Draft-model proposer: a smaller Llama-family model sharing the target's tokenizer drafts k tokens.

Each draft token x_i is drawn from the draft's own distribution q_i (same temperature / top-k / top-p as the
target), and q_i is returned with it so the verifier can apply min(1, p/q). The draft keeps its own KV cache and
resynchronises it with the sequence at every call: slots agreeing with the context are kept, the rest truncated.
"""
from __future__ import annotations

import copy

import torch

from ..model.host import upload
from ..model.llama import Llama
from ..model.rows import kv_bytes_per_token
from ..sampling import SamplingConfig, probs, sample, top_tokens
from ..tree import TokenTree
from .base import Proposal, Proposer, widen


class DraftModelProposer(Proposer):
    name = "draft"

    def __init__(self, model: Llama):
        self.model = model
        self.cache = None
        self._seen: list[int] = []  # tokens whose keys/values sit in self.cache, in order (`seen`)
        self.unread = None          # (fed tokens, proposal): the last proposal's tokens, cached before read back

    def prepare(self, capacity: int) -> None:
        if self.cache is None or self.cache.capacity < capacity:
            self.cache, self._seen, self.unread = self.model.new_cache(capacity), [], None

    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.model)

    @staticmethod
    def draft_together(jobs):   # sequences sharing this draft model draft in packed passes (serve.batch)
        return propose_together(jobs)

    def fork(self) -> "DraftModelProposer":
        """The same draft weights with a KV cache of its own (for another sequence of a batch)."""
        twin = copy.copy(self)
        twin.cache, twin._seen, twin.unread = None, [], None
        return twin

    @property
    def seen(self) -> list[int]:
        """The tokens whose keys and values sit in the cache, in order."""
        if self.unread is not None:                      # the last drafts, read back by the engine by now
            feed, proposal = self.unread
            self._seen.extend(feed + proposal.tokens[:-1])
            self.unread = None
        return self._seen

    def _kept(self, context: list[int]) -> int:
        """How many cached slots agree with `context` (the last token is always re-fed: its logits are needed)."""
        n = min(len(self.seen), len(context) - 1)
        if self.seen[:n] == context[:n]:
            return max(n, 0)
        keep = 0
        for a, b in zip(self.seen, context[:-1]):
            if a != b:
                break
            keep += 1
        return keep

    def behind(self, context: list[int]) -> int:
        return len(context) - (self._kept(context) if self.cache is not None else 0)

    def _sync(self, context: list[int]) -> list[int]:
        """Drop cached slots that disagree with `context`; return the context tokens still to be fed."""
        keep = self._kept(context)
        self.cache.truncate(keep)
        del self.seen[keep:]
        return context[keep:]

    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator, tree: TokenTree | None = None) -> Proposal:
        return propose_together([(self, context, k, sampling, generator)])[0]


@torch.inference_mode()
def propose_together(jobs: list[tuple[DraftModelProposer, list[int], int, SamplingConfig, torch.Generator]]
                     ) -> list[Proposal]:
    """Draft for several sequences that share one draft model: step j feeds every sequence still drafting in one
    packed pass (`Llama.forward_packed`), and each samples from its own q with its own generator. Each sequence's
    draws come in the same order as when it drafts alone, and packed rows equal lone ones (CPU bf16), so its
    proposal is exactly the one it would make alone. jobs: (proposer, context, k, sampling, generator).

    Drafted tokens stay on the device, each fed to the next step from there; the proposal leaves them there for
    the engine to read back with its verification's result (on a GPU every read-back waits for the work queued
    before it)."""
    model = jobs[0][0].model
    device = model.device
    head_ids = model.head_ids if model.cfg.head_tokens else None
    feeds = [prop._sync(context) for prop, context, *_ in jobs]                  # host token lists
    inputs = [upload([feed], device) for feed in feeds]                          # [1, n] each
    drawn, qs = [[] for _ in jobs], [[] for _ in jobs]                           # per job: [1] tokens, [head] q
    for step in range(max(k for _, _, k, _, _ in jobs)):
        active = [i for i, (_, _, k, _, _) in enumerate(jobs) if step < k]
        segments = []
        for i in active:
            cache, n = jobs[i][0].cache, inputs[i].shape[1]
            segments.append((inputs[i], torch.arange(cache.length, cache.length + n, device=device)[None],
                             cache, None))
        hidden = model.forward_packed(segments)                                   # per sequence [1, n, D]
        last = torch.stack([h[0, -1] for h in hidden])[None]                      # [1, active, D]
        logits = model.logits(last, full=False)[0]                                # [active, head], row-invariant
        for i, row_logits in zip(active, logits):
            _, _, _, sampling, generator = jobs[i]
            q = probs(row_logits, sampling)                                       # [head] (= [vocab] if full)
            row = top_tokens(row_logits) if sampling.greedy \
                else sample(q, upload(torch.rand((), generator=generator), device))
            token = row.view(1) if head_ids is None else head_ids[row.view(1)]    # [1] (a 0-dim index is read)
            drawn[i].append(token)
            qs[i].append(q)
            inputs[i] = token.view(1, 1)
    out = []
    for (prop, *_), feed, d, q_rows in zip(jobs, feeds, drawn, qs):
        if not q_rows:
            out.append(Proposal([]))
            continue
        q = widen(torch.stack(q_rows), head_ids, model.cfg.vocab_size)             # [k, vocab]
        out.append(Proposal(q=q, on_device=torch.cat(d)))                         # tokens [k], not read back
        prop.unread = (feed, out[-1])                    # its cache holds feed and all drafts but the last
    return out
