"""Draft-tree proposer: one draft model expands a static token tree (SpecInfer's top-k branching, one draft).

The tree's shape is fixed (`verispec.tree`): node (r1, ..., rd) holds the draft's r_d-th most likely token after
the path (r1, ..., r_{d-1}). Drafting takes one draft pass per depth: all nodes of a depth are fed together, each
attending to the context and its own ancestors only (the tree's ancestry mask over the draft's KV cache).
Children are deterministic picks (ranked by the draft's logits), so q is None: the verifier treats each child as
one-hot, and recursive rejection sampling stays exact at every temperature. The tree's shape being fixed, each
depth's tokens are gathered from the last pass's rankings on the device, and the whole tree is read back once.
"""
from __future__ import annotations

import torch

from ..model.host import upload
from ..sampling import SamplingConfig
from ..tree import TokenTree, check_ranks, topk_per_depth
from .base import Proposal
from .draft_model import DraftModelProposer
from .ngram import LookupRates, lookup_first

DEFAULT_WIDTHS = (2, 2, 1, 1, 1)


class DraftTreeProposer(DraftModelProposer):
    name = "draft-tree"
    makes_trees = True
    draft_together = None                   # each tree is drafted on its own

    def __init__(self, model, tree: TokenTree | None = None, graft: int = 0):
        super().__init__(model)
        self.tree = tree or topk_per_depth(list(DEFAULT_WIDTHS))
        check_ranks(self.tree, model.cfg.head_tokens or model.cfg.vocab_size, "the draft")
        self.width = max(self.tree.widths)                                 # children per node, at most
        self.graft, self.max_nodes = graft, self.tree.size + graft        # graft: the longest n-gram path
        self.lookup = LookupRates(graft)                                   # how far this request's paths hold

    def prepare(self, capacity: int) -> None:
        super().prepare(capacity)
        self.lookup = LookupRates(self.graft)

    def fork(self) -> "DraftTreeProposer":
        twin = super().fork()
        twin.lookup = LookupRates(self.graft)
        return twin

    def _ranked(self, feed: torch.Tensor, positions: list[int], mask: torch.Tensor | None) -> torch.Tensor:
        """Append `feed` [1, m] to the draft's cache (RoPE at `positions`); return each token's next-token
        ranking, as vocabulary ids [m, width]."""
        device = self.model.device
        hidden = self.model(feed, upload([positions], device), self.cache, mask)  # [1, m, D]
        logits = self.model.logits(hidden[0], full=False)                         # [m, head]
        top = logits.topk(min(self.width, logits.shape[-1]), dim=-1).indices      # [m, width]
        return self.model.head_ids[top] if self.model.cfg.head_tokens else top

    @torch.inference_mode()
    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator, tree: TokenTree | None = None) -> Proposal:
        return lookup_first(context, k, lambda: self._tree(context, tree or self.tree.cut(k)), self.lookup)

    def _tree(self, context: list[int], tree: TokenTree) -> Proposal:
        device = self.model.device
        feed = self._sync(context)
        ctx = len(context)                               # the root, context[-1], sits at position ctx - 1
        start = self.cache.length
        rows = self._ranked(upload([feed], device), list(range(start, start + len(feed))), None)[-1:]   # [1, w]
        self.seen.extend(feed)
        levels, first = [], 0                            # first: the node of rows[0] (the root, then a depth's first)
        for d in range(1, tree.depth + 1):
            nodes = [i for i in range(1, tree.size + 1) if tree.depths[i] == d]
            a, b = nodes[0], nodes[-1]                                            # breadth-first: contiguous
            at = [(tree.parents[i] - first) * rows.shape[1] + tree.rank(i) for i in nodes]
            level = rows.reshape(-1)[upload(at, device)]                          # [m] node tokens, on the device
            levels.append(level)
            if not any(tree.children(i) for i in nodes):
                break
            mask = torch.cat([torch.ones(b - a + 1, ctx, dtype=torch.bool),
                              tree.ancestry[a:b + 1, 1:b + 1]], 1)[None]           # [1, m, ctx + b]
            rows, first = self._ranked(level[None], [ctx - 1 + d] * (b - a + 1), upload(mask, device)), a
        self.cache.truncate(ctx)                         # keep only the context: the tree's slots are scratch
        return Proposal(tree=tree, on_device=torch.cat(levels))                  # [n], read back by the engine
