"""Medusa proposer: heads on the target's own last hidden state fill a static token tree, no draft model.

The engine hands every proposer that has `observe` the target's final hidden states of the positions it just
kept; the last of them is the state the target drew the newest token from. Head d, applied to that state, ranks
the token d positions past the newest, so tree node (r1, ..., rd) holds head d's r_d-th choice (Medusa's
Cartesian candidates: a node's token depends on its depth and rank, not on its parent's token). Choices are
deterministic given the context, so q is None and recursive rejection sampling stays exact at any temperature.

The default tree is not hand-picked: `trees.json` beside the heads holds their measured top-r accuracies, and
`tree_from_acceptance` grows the tree with the most expected accepted tokens for each size; `auto_tree` picks the
size whose expected tokens per unit of verification cost (the profile's cost curve) are highest.
"""
from __future__ import annotations

import copy

import torch

from ..model.host import upload
from ..model.medusa import MedusaHeads
from ..sampling import SamplingConfig
from ..tree import TokenTree, check_ranks, node_reach, tree_from_acceptance
from .base import Proposal, Proposer, top_indices
from .ngram import LookupRates, lookup_first

TREE_SIZES = (1, 2, 3, 4, 8, 16, 32, 64)      # 1-3: where rows are dear (AVX2), a short chain or a fork


def auto_tree(acceptance: list[list[float]], tree_cost, c_heads: float = 0.0,
              sizes=TREE_SIZES) -> tuple[TokenTree, dict[int, float]]:
    """The tree size with the highest predicted speedup (1 + E[accepted]) / (T(1 + n)/T(1) + c_heads);
    tree_cost(n) gives T(1 + n)/T(1) (`CostProfile.tree_cost`)."""
    trees = {n: tree_from_acceptance(acceptance, n) for n in sizes}
    predicted = {n: (1 + expected) / (tree_cost(n) + c_heads) for n, (_, expected) in trees.items()}
    best = max(predicted, key=lambda n: (predicted[n], -n))
    return trees[best][0], predicted


class MedusaProposer(Proposer):
    name = "medusa"
    makes_trees = reads_features = True
    drafts_by_depth = False                          # every head runs in one pass, whatever the tree's depth

    def __init__(self, heads: MedusaHeads, tree: TokenTree, acceptance: list[list[float]] | None = None,
                 graft: int = 0):
        if tree.depth > heads.num_heads:
            raise ValueError(f"a tree {tree.depth} deep needs {tree.depth} heads, these have {heads.num_heads}")
        check_ranks(tree, len(heads.head_ids), "each Medusa head")
        self.heads, self.tree = heads, tree
        # E[accepted tokens per cycle] at temperature 0, from the heads' measured accuracy (for the cost model)
        self.node_reach = None if acceptance is None else node_reach(tree, acceptance)
        self.expected_accepted = None if acceptance is None else sum(self.node_reach.values())
        self.widths = tree.widths
        self.graft, self.max_nodes = graft, tree.size + graft     # graft: the longest n-gram path merged in
        self.hidden: torch.Tensor | None = None          # [D] the state the newest token was drawn from
        self.lookup = LookupRates(graft)                 # how far this request's lookup paths hold

    def prepare(self, capacity: int) -> None:
        self.hidden, self.lookup = None, LookupRates(self.graft)

    def fork(self) -> "MedusaProposer":
        twin = copy.copy(self)
        twin.hidden, twin.lookup = None, LookupRates(self.graft)
        return twin

    def observe(self, hidden: torch.Tensor) -> None:
        """hidden: [m, D] the target's final hidden states at the positions kept this cycle."""
        self.hidden = hidden[-1]

    @torch.inference_mode()
    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator, tree: TokenTree | None = None) -> Proposal:
        if self.hidden is None or k < 1:
            return Proposal([])
        return lookup_first(context, k, lambda: self._tree(tree or self.tree.cut(k)), self.lookup)

    def _tree(self, tree: TokenTree) -> Proposal:
        """Node (r1, ..., rd) of `tree` (a subtree of the heads' tree) holds head d's r_d-th choice: gathered on
        the device, read back by the engine."""
        logits = self.heads(self.hidden)                                           # [K, H]
        flat, at = top_indices(logits[:tree.depth], self.widths[:tree.depth])   # per depth, its ranked choices
        picks = upload([at[len(c) - 1] + c[-1] for c in tree.choices], logits.device)   # [n]
        return Proposal(tree=tree, on_device=self.heads.head_ids[flat[picks]])    # [n] token ids
