"""EAGLE proposer: the EAGLE head (verispec.model.eagle) drafts in feature space from the target's own features.

The head keeps a KV cache of its own. Its true entries come from the target's features, which the engine hands
over after every pass (`observe`); nothing of the target is recomputed. Drafting then feeds the head's predicted
features back in, and the draft entries are dropped again once the proposal is made.

Three shapes:
- chain: k tokens sampled from the head's q (its warped distribution over the head tokens, 0 elsewhere), with q
  returned, so min(1, p/q) verification is exact at any temperature;
- static tree: the head's top-r choices at each node of a fixed tree (built, like Medusa's, from the head's
  measured per-depth, per-rank accuracy); children are deterministic picks, q is one-hot, recursive rejection
  sampling is exact at any temperature;
- dynamic tree (EAGLE-2): from the root, expand at each depth the `expand` drafted nodes with the highest
  cumulative confidence (product of the head's temperature-1 probabilities along the path), each getting its
  top-`expand` children; after `depth` levels rerank every drafted node by that confidence and verify the top
  `nodes`. Children are still deterministic picks: the tree is a function of the context alone (never of the
  target's random draws), which is the one assumption recursive rejection sampling needs to stay exact, and
  `verispec audit --method eagle --tree dynamic` tests it.
  With `graft` > 0, the prompt-lookup continuation (up to `graft` tokens, verispec.proposers.ngram, as far as
  this request's earlier paths held: `LookupRates`) joins a static or dynamic tree as one more path; and where
  the context's last SURE or more tokens occurred before, always followed by the same token, that match's
  continuation is verified alone, up to k tokens, and no tree is drafted (`lookup_first`). Still deterministic
  picks, still a function of the context alone.
"""
from __future__ import annotations

import copy

import torch

from ..model import graphs
from ..model.eagle import EagleHead
from ..model.host import upload
from ..model.rows import kv_bytes_per_token
from ..sampling import SamplingConfig
from ..tree import TokenTree, build_tree, check_ranks, node_reach, tree_from_acceptance
from .base import Proposal, Proposer, top_choices, widen
from .eagle_graph import DraftGraph, chain_draft, dynamic_draft, eager_pass, plan_static, static_draft
from .ngram import LookupRates, lookup_first


_HOST_RANKED = [False]          # tests: trees drafted the older way, ranked on the host (`_tree`)
_ONE_GRAPH = [True]             # tests: False drafts a tree pass by pass on a graphed device too


class EagleProposer(Proposer):
    name = "eagle"
    reads_features = True

    def __init__(self, head: EagleHead, mode: str = "chain", tree: TokenTree | None = None, nodes: int = 8,
                 depth: int = 5, expand: int = 4, graft: int = 0, acceptance: list[list[float]] | None = None):
        """acceptance: the head's measured per-depth, per-rank accuracy (its config's): auto k's prior yield of a
        static tree, and of a dynamic one (that of the best static tree of `nodes` nodes)."""
        if mode not in ("chain", "static", "dynamic"):
            raise ValueError(f"EAGLE mode must be chain, static or dynamic, got {mode!r}")
        if mode == "static" and tree is None:
            raise ValueError("a static EAGLE tree needs its tree")
        self.head, self.mode = head, mode
        self.ids = head.head_ids.tolist()                    # the head's tokens, on the host (no device reads)
        self.tree = tree if mode == "static" else None       # the engine's static tree (None: chain or dynamic)
        if self.tree is not None:
            check_ranks(self.tree, len(self.ids), "the EAGLE head")
        self.makes_trees = mode != "chain"
        if graft and mode == "chain":
            raise ValueError("an n-gram path is grafted onto EAGLE trees, not chains")
        self.nodes, self.depth, self.expand, self.graft = nodes, depth, expand, graft
        self.max_nodes = (tree.size if mode == "static" else nodes if mode == "dynamic" else 0) + graft
        if mode == "dynamic" and acceptance:
            self.expected_accepted = tree_from_acceptance(acceptance, nodes)[1]
        elif mode == "static" and acceptance:               # auto k's prior: verify the tree or decode plainly
            self.node_reach = node_reach(tree, acceptance)
            self.expected_accepted = sum(self.node_reach.values())
        self.cache, self.feats, self.known, self.fed, self.root = None, None, 0, 0, None
        self.lookup = LookupRates(graft)                     # how far this request's lookup paths hold
        self.plans: dict[tuple, list] = {}                   # a static tree's drafting plan, per tree
        self.graphs: dict[tuple, DraftGraph] = {}            # a tree's whole draft, per shape (graphed device)

    def fork(self) -> "EagleProposer":
        twin = copy.copy(self)
        twin.cache, twin.feats, twin.known, twin.fed, twin.root = None, None, 0, 0, None
        twin.graphs, twin.lookup = {}, LookupRates(self.graft)
        return twin

    def prepare(self, capacity: int) -> None:
        spare = max(self.max_nodes, 1) + 16
        if self.cache is None or self.cache.capacity < capacity + spare:
            d = self.head.cfg.hidden_size
            self.cache = self.head.new_cache(capacity + spare)
            self.graphs = {}                                 # they write into the old cache
            self.feats = torch.empty(self.cache.capacity, d, dtype=self.head.out.dtype,    # (a graphed device
                                     device=self.head.out.device)                     # rounds capacities up)
        self.cache.truncate(0)
        self.known = self.fed = 0
        self.lookup = LookupRates(self.graft)

    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.head.decoder)

    def observe(self, hidden: torch.Tensor) -> None:
        """hidden: [m, D] the target's features at the positions it kept (appended in order)."""
        self.feats[self.known:self.known + len(hidden)] = hidden
        self.known += len(hidden)

    @torch.inference_mode()
    def propose(self, context: list[int], k: int, sampling: SamplingConfig,
                generator: torch.Generator, tree: TokenTree | None = None) -> Proposal:
        if self.known == 0 or k < 1 or self.known + 1 > len(context):
            return Proposal([])
        if self.mode == "chain":
            return self._drafted(context, lambda root: self._chain(root, len(context), k, sampling, generator))
        return lookup_first(context, k, lambda: self._drafted(
            context, lambda root: self._tree(root, len(context), k, tree)), self.lookup)

    def _drafted(self, context: list[int], draft) -> Proposal:
        """draft(root) from the head's prediction of the newest token's feature root [1, 1, D]; the head's draft
        entries are dropped again afterwards."""
        root = self._catch_up(context)
        try:
            return draft(root)
        finally:
            self.cache.truncate(self.fed)

    def _catch_up(self, context: list[int]) -> torch.Tensor:
        """Feed the head the true features it has not seen: (f_j, x_{j+1}) for the positions j known since the
        last call; return its prediction of the newest token's feature [1, 1, D]."""
        if self.fed == self.known:                         # proposing again at the same point
            return self.root
        first = len(context) - 1 - self.known              # position of feats[0] (> 0 after a reused prefix)
        j0, device = first + self.fed, self.head.out.device
        feats = self.feats[self.fed:self.known][None]                             # [1, m, D]
        tokens = upload([context[j0 + 1:len(context)]], device)                   # [1, m]
        positions = torch.arange(j0, len(context) - 1, device=device)[None]       # [1, m]
        pred = self.head(feats, tokens, positions, self.cache)                    # [1, m, D]
        self.fed, self.root = self.known, pred[:, -1:]
        return self.root

    def _chain(self, f: torch.Tensor, n: int, k: int, sampling: SamplingConfig, generator) -> Proposal:
        """k tokens sampled from the head's q (`chain_draft`), left on the device with q [k, V]."""
        head = self.head
        u = None if sampling.greedy else torch.rand(k, generator=generator)                 # [k]
        rows, q = self._on_device(("chain", k, sampling), lambda r, run, x: chain_draft(head, k, sampling, r, run, x),
                                  [(i, 1) for i in range(k - 1)], f[0, 0], n, u)
        return Proposal(q=widen(q, head.head_ids, head.embed.shape[0]), on_device=head.head_ids[rows])

    def _ancestry(self, rows: list[int], slot_of: dict[int, int], parent, root: int) -> torch.Tensor:
        """The head-cache mask [m, S] of drafted nodes `rows`, appended to the head's cache now: each sees the
        context the head was fed, its own slot and its drafted ancestors' (parent[i], up to `root`); records
        each row's slot in `slot_of`."""
        start = self.cache.length
        mask = torch.zeros(len(rows), start + len(rows), dtype=torch.bool)
        mask[:, :self.fed] = True
        for r, i in enumerate(rows):
            slot_of[i] = start + r
            j = i
            while j != root:
                mask[r, slot_of[j]] = True
                j = parent[j]
        return mask

    def _on_device(self, key: tuple, draft, passes: list[tuple[int, int]], root: torch.Tensor, n: int,
                   extra: torch.Tensor | None = None):
        """draft(root [D], head_pass, extra) run on the device: on a graphed device as one replayed graph per
        (cache, key) (`DraftGraph`), where the head cache has room for its head passes (used, m) padded to their
        row buckets; else eagerly. extra: a host tensor the draft reads on the device (a chain's uniforms)."""
        device, start = self.head.out.device, self.cache.length
        extra = None if extra is None else upload(extra, device)
        buckets = [graphs.bucket(m) for _, m in passes]
        fits = None not in buckets and start + max((u + b for (u, _), b in zip(passes, buckets)), default=0) \
            <= self.cache.capacity and n + len(passes) < len(self.head.decoder._rope[0])     # positions tabled
        if graphs.enabled(device) and _ONE_GRAPH[0] and fits:
            g = self.graphs.get(key)
            if g is None:
                g = self.graphs[key] = DraftGraph(self.head, self.cache, draft, device.type == "cuda")
            return g(root, start, n, extra)
        return draft(root, eager_pass(self.head, self.cache, n), extra)

    def _static_tree(self, root: torch.Tensor, n: int, tree: TokenTree) -> Proposal:
        """A static tree drafted on the device (`static_draft`), left there: the engine reads the tokens back with
        its verification. The same choices as `_tree`'s, ties included."""
        plan = self.plans.get(tree.choices)
        if plan is None:
            plan = self.plans[tree.choices] = plan_static(tree, self.head.out.device)
        tokens = self._on_device(("static", tree.choices), lambda r, run, _: static_draft(self.head, plan, r, run),
                                 [(d.used, d.m) for d in plan if d.m], root[0, 0], n)
        return Proposal(tree=tree, on_device=tokens)

    def _dynamic_tree(self, root: torch.Tensor, n: int, depth: int) -> Proposal:
        """EAGLE-2's tree drafted on the device (`dynamic_draft`), read back once: the same tree as `_tree`'s."""
        E = self.expand
        drafted = self._on_device(("dynamic", depth), lambda r, run, _: dynamic_draft(self.head, E, depth, r, run),
                                  [(d * E, E) for d in range(depth - 1)], root[0, 0], n)
        order, parent, token = drafted.tolist()                                     # one read
        path: list[tuple] = []
        for i, p in enumerate(parent):                    # siblings are consecutive, in rank order
            path.append((path[p] if p >= 0 else ()) + ((i if p < 0 else i - E) % E,))
        return _most_confident(order, parent, path, [self.ids[t] for t in token], self.nodes)

    def _tree(self, root: torch.Tensor, n: int, k: int, cut: TokenTree | None = None) -> Proposal:
        """Draft a token tree level by level; every node's children are its top choices (deterministic). A static
        tree's: `cut` (a subtree of it) where given, else the tree cut to depth k."""
        head, device = self.head, self.head.out.device
        static = (cut or self.tree.cut(k)) if self.mode == "static" else None
        depth = static.depth if static else min(self.depth, k, self.nodes)      # N nodes reach depth N at most
        if not _HOST_RANKED[0]:
            return self._static_tree(root, n, static) if static else self._dynamic_tree(root, n, depth)
        # a static tree's ranked choices needed per node path (which nodes to expand, and into how many)
        children: dict[tuple, int] = {}
        for c in static.choices if static else ():
            children[c[:-1]] = max(children.get(c[:-1], 0), c[-1] + 1)
        # drafted nodes: token, parent (-1: root), path of sibling ranks, cumulative log-confidence
        token, parent, path, score = [], [], [], []
        pred_of, slot_of = {-1: root[0, 0]}, {}                                   # node -> its f^ / cache slot

        def add_children(parents: list[int], logits: torch.Tensor):
            """Each parent's top choices from its row of logits [m, H], read back at once."""
            bases = [path[p] if p >= 0 else () for p in parents]
            widths = [children[base] if static else self.expand for base in bases]
            rows = top_choices(logits.float().log_softmax(-1), widths)
            for p, base, row in zip(parents, bases, rows):
                for r, (lp, i) in enumerate(row):
                    token.append(self.ids[i])
                    parent.append(p)
                    path.append(base + (r,))
                    score.append((score[p] if p >= 0 else 0.0) + lp)

        add_children([-1], head.logits(root[0, 0])[None])
        for d in range(1, depth):
            frontier = [i for i in range(len(token)) if len(path[i]) == d]
            if static:   # expand exactly the tree's nodes that have children
                frontier = [i for i in frontier if path[i] in children]
            else:
                frontier = sorted(frontier, key=lambda i: -score[i])[:self.expand]
            if not frontier:
                break
            ancestry = self._ancestry(frontier, slot_of, parent, -1)                   # [m, S]
            feats = torch.stack([pred_of[parent[i]] for i in frontier])[None]      # [1, m, D]
            toks = upload([[token[i] for i in frontier]], device)                  # [1, m]
            positions = torch.full((1, len(frontier)), n - 2 + d, device=device)   # [1, m]
            pred = head(feats, toks, positions, self.cache, upload(ancestry[None], device))[0]   # [m, D]
            for row, i in enumerate(frontier):
                pred_of[i] = pred[row]
            add_children(frontier, head.logits(pred))                              # logits [m, H]
        if not static:
            order = sorted(range(len(token)), key=lambda i: (-score[i], len(path[i])))
            return _most_confident(order, parent, path, token, self.nodes)
        wanted = set(static.choices)
        by_path = {path[i]: token[i] for i in range(len(token)) if path[i] in wanted}
        return Proposal([by_path[c] for c in static.choices], None, static)


def _most_confident(order: list[int], parent: list[int], path: list[tuple], tokens: list[int], nodes: int):
    """A dynamic tree's proposal: the `nodes` most confident drafted nodes (`order`: best first; a parent scores at
    least its child, so parents come first), node i with its sibling-rank path and token id. Kept siblings are
    their parent's top choices (one parent score, so rank order): ranks 0, 1, ..."""
    keep, chosen = [], set()
    for i in order:
        if len(keep) == nodes:
            break
        if parent[i] < 0 or parent[i] in chosen:
            keep.append(i)
            chosen.add(i)
    tree = build_tree([path[i] for i in keep])
    by_path = {path[i]: tokens[i] for i in keep}
    return Proposal([by_path[c] for c in tree.choices], None, tree)
