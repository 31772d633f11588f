"""EAGLE's trees drafted on the device with fixed shapes, and on a graphed device in one replayed graph.

A tree is drafted depth by depth: rank the parents' rows, gather the picks, run the head over the nodes to expand,
rank again. Every shape in that is fixed, by the tree (static trees) or by `expand` and the depth (EAGLE-2's
dynamic trees, whose frontier is always the `expand` most confident nodes). So the drafting is one function of the
root's predicted feature (`static_draft`, `dynamic_draft`; a chain's too, `chain_draft`), written once and run
two ways:
- eagerly, each head pass a call of the head (on the CPU its row-invariant kernels; on a GPU one `GraphRunner`
  replay), which is how the CPU drafts;
- on a graphed device, captured whole (`DraftGraph`) once per (head cache, shape) and replayed: the host fills
  three inputs (the root's feature, the head cache's length, the context's length) and launches one graph. On an
  H200 a 15-node tree's depth-by-depth draft spent 3.4 ms a cycle issuing small kernels and copies from Python
  (session 35), more than the target's pass.
Both run the same head passes (the graph's are padded to the row bucket `GraphRunner` would pick, masked the way
it masks them: a row's bits depend on its inputs and the pass's shapes, never on the other rows), the same
rankings (`topk` over the same rows), so they give the same tokens; a test checks it on the CPU, uncaptured.
Draft entries land in the head cache past its length, where the proposer drops them.
"""
from __future__ import annotations

import torch

from ..model import graphs
from ..model.rows import RowPlan
from ..sampling import probs, sample, top_tokens
from ..tree import TokenTree
from .base import rank_plan, ranked


class _Depth:
    """One depth of a static tree, planned once: how its tokens are ranked and picked, and the head pass over the
    nodes it expands."""

    def __init__(self, groups, picks, m=0, used=0, feat_idx=None, tok_idx=None, rel=None):
        self.groups, self.picks = groups, picks   # `rank_plan`'s groups; [count] picks
        self.m, self.used = m, used               # expanded nodes, head-cache slots the tree used before them
        self.feat_idx, self.tok_idx = feat_idx, tok_idx   # [m]: their parents' feature rows, their pick rows
        # [m, used + m] bool: the tree's slots each one sees, with its head pass's rows planned once (`RowPlan`)
        self.rel = None if rel is None else RowPlan(m, rel)


def plan_static(tree: TokenTree, device) -> list[_Depth]:
    """A static tree's drafting plan: what `static_draft` ranks, picks and passes at each depth."""
    out, parents, used, slot_of, pred_row = [], [0], 0, {}, {0: 0}
    for d in range(1, tree.depth + 1):
        nodes = [i for i in range(1, tree.size + 1) if tree.depths[i] == d]        # breadth-first: in order
        groups, at = rank_plan([1 + max(tree.rank(c) for c in tree.children(p)) for p in parents], device)
        row = {p: r for r, p in enumerate(parents)}
        picks = torch.tensor([at[row[tree.parents[i]]] + tree.rank(i) for i in nodes], device=device)
        expanded = [i for i in nodes if tree.children(i)]
        if not expanded:
            out.append(_Depth(groups, picks))
            break
        rel = torch.zeros(len(expanded), used + len(expanded), dtype=torch.bool)
        for r, i in enumerate(expanded):                          # its own slot and its ancestors'
            slot_of[i] = used + r
            j = i
            while j != 0:
                rel[r, slot_of[j]] = True
                j = tree.parents[j]
        out.append(_Depth(groups, picks, len(expanded), used,
                          torch.tensor([pred_row[tree.parents[i]] for i in expanded], device=device),
                          torch.tensor([nodes.index(i) for i in expanded], device=device), rel.to(device)))
        pred_row = {i: r for r, i in enumerate(expanded)}
        parents, used = expanded, used + len(expanded)
    return out


def static_draft(head, plan: list[_Depth], root: torch.Tensor, head_pass) -> torch.Tensor:
    """root [D] -> the static tree's tokens [N] (breadth-first). head_pass(f [m, D], token ids [m], d, used,
    rel) -> the head's predicted features [m, D] at depth d, their keys after `used` draft entries, each row
    seeing the context and the draft entries where rel [m, used + m] is True (a `RowPlan` of it, or the mask
    itself; None: a chain's row, all of them):
    `eager_pass`, or `DraftGraph`'s fixed-shape pass."""
    feats, logits, levels = root[None], head.logits(root)[None], []        # [1, D], [1, H]: the root's row
    for d, depth in enumerate(plan, 1):
        ranks = ranked(logits.float().log_softmax(-1), depth.groups)
        levels.append(head.head_ids[ranks[depth.picks]])                   # [count] token ids
        if not depth.m:
            break
        feats = head_pass(feats[depth.feat_idx], levels[-1][depth.tok_idx], d, depth.used, depth.rel)   # [m, D]
        logits = head.logits(feats)                                        # [m, H]
    return torch.cat(levels)


def dynamic_draft(head, expand: int, depth: int, root: torch.Tensor, head_pass) -> torch.Tensor:
    """root [D] -> EAGLE-2's drafted nodes [3, M]: their order by confidence (stable: ties in node order), their
    parents (node indices, -1: the root) and their head-token indices. From the root, each depth's `expand` most
    confident nodes get their top `expand` children; confidence sums the head's log-probabilities in float64,
    as `EagleProposer._tree` sums them on the host, and ties sort in node order as Python sorts them."""
    E, device = expand, root.device
    top = head.logits(root)[None].float().log_softmax(-1).topk(E)         # [1, E]
    score, token = [top.values[0].double()], [top.indices[0]]             # per depth: [m] each
    parent = [torch.full((E,), -1, device=device)]
    seen = torch.zeros(E, E * (depth - 1), dtype=torch.bool, device=device)    # [m, slots] ancestors' slots
    feat, base = root.expand(E, -1), 0                                     # [m, D] each node's parent's f^
    for d in range(1, depth):
        pick = torch.sort(-score[-1], stable=True).indices[:E]             # [E] the most confident nodes
        seen = seen[pick]
        seen[:, (d - 1) * E:d * E] |= torch.eye(E, dtype=torch.bool, device=device)      # each its own slot
        pred = head_pass(feat[pick], head.head_ids[token[-1][pick]], d, (d - 1) * E, seen[:, :d * E])
        top = head.logits(pred).float().log_softmax(-1).topk(E)           # [E, E]
        score.append((score[-1][pick][:, None] + top.values.double()).flatten())          # [E * E]
        token.append(top.indices.flatten())
        parent.append(base + pick.repeat_interleave(E))
        base += len(score[-2])
        seen, feat = seen.repeat_interleave(E, 0), pred.repeat_interleave(E, 0)
    score = torch.cat(score)
    return torch.stack([torch.sort(-score, stable=True).indices, torch.cat(parent), torch.cat(token)])


def chain_draft(head, k: int, sampling, root: torch.Tensor, head_pass, u: torch.Tensor | None):
    """root [D] -> EAGLE's chain: k head-token indices [k] and the head's q at each [k, H], drawn with the
    uniforms u [k] (None: greedy, the head's argmax). Each drafted token's feature comes from a one-row pass."""
    f, rows, qs = root, [], []
    for i in range(k):
        logits = head.logits(f)                                           # [H]
        q = probs(logits, sampling)                                       # [H]
        rows.append(top_tokens(logits) if u is None else sample(q, u[i]))
        qs.append(q)
        if i + 1 < k:                                                     # f^ of the token just drafted
            f = head_pass(f[None], head.head_ids[rows[-1].view(1)], i + 1, i, None)[0]      # [D]
    return torch.stack(rows), torch.stack(qs)


def eager_pass(head, cache, n: int):
    """A head pass as the head runs it (its cache grows by the pass; the proposer truncates it afterwards). A rel
    mask covers the tree's draft entries, after the context every row sees (a static tree's comes planned)."""

    def run(f, tokens, d, used, rel):
        m = len(tokens)
        positions = torch.full((1, m), n - 2 + d, device=f.device)                            # [1, m]
        rows = rel if isinstance(rel, RowPlan) else RowPlan.chain(m) if rel is None else RowPlan(m, rel)
        return head(f[None], tokens[None], positions, cache, rows)[0]
    return run


class DraftGraph:
    """A drafting function (`static_draft`, `dynamic_draft` or `chain_draft`, as draft(root, head_pass, extra))
    over one head cache, with fixed-shape head passes: `__call__(root, start, n, extra)` -> its output, ours to
    keep. Captured as a CUDA graph on first use where `capture`; else run as is (the CPU, uncaptured, for tests).
    The graph reads the head's RoPE table where it was at capture: it holds that table, and captures again when
    the head has grown a new one."""

    def __init__(self, head, cache, draft, capture: bool):
        dev = head.out.device
        self.head, self.cache, self.layers, self.draft = head, cache, cache.layers, draft
        self.rope = None                                  # the (cos, sin) tables the graph reads (see above)
        self.root = torch.zeros(head.cfg.hidden_size, dtype=head.out.dtype, device=dev)    # [D]   inputs,
        self.start = torch.zeros((), dtype=torch.long, device=dev)                         # []    filled
        self.newest = torch.zeros((), dtype=torch.long, device=dev)                        # []    each call
        self.cols = torch.arange(cache.capacity, device=dev)                               # [C]
        self.extra = None                                                                  # as `extra` is
        self.capture, self.graph, self.out = capture, None, None
        self.pool = torch.cuda.graph_pool_handle() if capture else None

    def _pass(self, f, tokens, d, used, rel):
        """The head pass `GraphRunner` would run, on device inputs: rows padded to the bucket (zero inputs at
        position 0, causal), real rows at positions n - 2 + d, keys in slots start + used + r."""
        head, m = self.head, len(tokens)
        rows = graphs.bucket(m)
        x = head.fc(torch.cat([f[None], head.embed[tokens][None].to(f.dtype)], -1))                 # [1, m, D]
        x = torch.cat([x, x.new_zeros(1, rows - m, x.shape[-1])], 1)                                 # [1, R, D]
        r = torch.arange(rows, device=x.device)
        positions = torch.where(r < m, self.newest + (d - 2), 0)[None]                               # [1, R]
        slots = self.start + used + r                                                                # [R]
        j = self.cols - self.start                                        # [C] each slot's place from the start
        width = used + rows
        if isinstance(rel, RowPlan):
            rel = rel.mask
        if rel is None:                                                   # a chain's one row: every entry
            rel = torch.ones(m, used + m, dtype=torch.bool, device=x.device)
        rel = torch.cat([torch.cat([rel, rel.new_zeros(m, rows - m)], 1),
                         torch.arange(width, device=x.device)[None] <= (used + r[m:, None])])      # [R, width]
        mask = (self.cols < self.start)[None] | (rel[:, j.clamp(0, width - 1)] & ((j >= 0) & (j < width)))
        pred = head.decoder.run_dense(x, positions, graphs.Dense(self.layers, slots, mask[None, None]))
        return pred[0, :m]                                                                           # [m, D]

    def __call__(self, root: torch.Tensor, start: int, n: int, extra: torch.Tensor | None = None):
        """-> draft(root, head_pass, extra): a tensor or a tuple of them, ours to keep. extra: one more device
        input of a fixed shape (a chain's uniforms)."""
        self.root.copy_(root)
        self.start.fill_(start)
        self.newest.fill_(n)
        self.cache.stale(start)                           # its passes write the head cache from `start` on
        if extra is not None:
            if self.extra is None:
                self.extra = torch.empty_like(extra)
            self.extra.copy_(extra)
        if not self.capture:
            return self.draft(self.root, self._pass, self.extra)
        if self.rope is not self.head.decoder._rope:     # an eager pass grew the table: capture again
            self.graph, self.rope = None, self.head.decoder._rope
        if self.graph is None:
            self.graph, self.out = graphs.capture(lambda: self.draft(self.root, self._pass, self.extra), self.pool)
        self.graph.replay()
        return tuple(t.clone() for t in self.out) if isinstance(self.out, tuple) else self.out.clone()
