"""Token trees as data: candidate continuations verified in one target pass.

A tree's nodes are named by their paths of choice ranks: (0,) is the proposer's first choice for the next token,
(0, 1) its second choice after that, (1,) the second choice for the next token, and so on. The root (the newest
token, already emitted) is implicit at index 0; nodes follow in breadth-first order at indices 1..n.
`build_tree` validates the paths and derives everything verification needs:
- parents:   [1 + n] parent index of each node (-1 for the root);
- depths:    [1 + n] depth (root 0), added to the sequence position to get each node's RoPE position;
- ancestry:  [1 + n, 1 + n] bool, True where node i may attend to node j (j is i or one of i's ancestors);
- paths:     root-to-leaf node index lists (Medusa's "retrieve indices").
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from .errors import VerispecError


@dataclass(frozen=True)
class TokenTree:
    choices: tuple[tuple[int, ...], ...]   # [n] path of choice ranks of each node, breadth-first
    parents: tuple[int, ...]               # [1 + n]
    depths: tuple[int, ...]                # [1 + n]
    ancestry: torch.Tensor                 # [1 + n, 1 + n] bool
    paths: tuple[tuple[int, ...], ...]     # root-to-leaf node indices (root excluded)

    @property
    def size(self) -> int:
        """Nodes besides the root."""
        return len(self.choices)

    @property
    def depth(self) -> int:
        return max(self.depths)

    def children(self, node: int) -> list[int]:
        return [i for i, p in enumerate(self.parents) if p == node]

    def rank(self, node: int) -> int:
        """A node's choice rank among its siblings (its path's last element)."""
        return self.choices[node - 1][-1]

    @property
    def widths(self) -> list[int]:
        """Per depth 1..depth, the most children any node there has among its siblings (max rank + 1): how many
        ranked choices a proposer needs at that depth."""
        return [1 + max(c[d] for c in self.choices if len(c) > d) for d in range(self.depth)]

    def cut(self, depth: int) -> "TokenTree":
        """The tree without its nodes deeper than `depth` (>= 1): what fits a shorter length budget."""
        return self if depth >= self.depth else _cut(self.choices, depth)


def build_tree(choices: list[tuple[int, ...]] | list[list[int]], max_depth: int | None = None,
               max_nodes: int = 256) -> TokenTree:
    """Validate paths of choice ranks and derive the tree's buffers; a bad tree raises VerispecError."""
    nodes = sorted({tuple(int(r) for r in c) for c in choices}, key=lambda c: (len(c), c))
    if not nodes:
        raise VerispecError("a token tree needs at least one node")
    if len(nodes) != len(choices):
        raise VerispecError("a token tree lists some node twice")
    if len(nodes) > max_nodes:
        raise VerispecError(f"a token tree of {len(nodes)} nodes exceeds the limit of {max_nodes}")
    index = {c: i + 1 for i, c in enumerate(nodes)}
    parents, depths = [-1], [0]
    for c in nodes:
        if not c or min(c) < 0:
            raise VerispecError(f"bad tree node {list(c)}: choice ranks are non-negative, paths non-empty")
        if max_depth is not None and len(c) > max_depth:
            raise VerispecError(f"tree node {list(c)} is deeper than the proposer can fill ({max_depth})")
        parent = index.get(c[:-1], 0) if len(c) > 1 else 0
        if len(c) > 1 and c[:-1] not in index:
            raise VerispecError(f"tree node {list(c)} is an orphan: its parent {list(c[:-1])} is missing")
        parents.append(parent)
        depths.append(len(c))
    n = len(nodes) + 1
    ancestry = torch.eye(n, dtype=torch.bool)
    for i in range(1, n):
        j = parents[i]
        while j >= 0:
            ancestry[i, j] = True
            j = parents[j]
    is_parent = set(parents)
    paths = []
    for leaf in range(1, n):
        if leaf in is_parent:
            continue
        path, j = [], leaf
        while j > 0:
            path.append(j)
            j = parents[j]
        paths.append(tuple(reversed(path)))
    return TokenTree(tuple(nodes), tuple(parents), tuple(depths), ancestry, tuple(paths))


@lru_cache(maxsize=64)
def _cut(choices: tuple[tuple[int, ...], ...], depth: int) -> TokenTree:
    return build_tree([c for c in choices if len(c) <= depth])


def check_ranks(tree: TokenTree, ranked: int, who: str) -> None:
    """A one-line error where a tree asks for a choice rank past the `ranked` tokens a proposer ranks."""
    if max(tree.widths, default=0) > ranked:
        raise VerispecError(f"the tree asks for rank {max(tree.widths) - 1}, and {who} ranks {ranked} tokens")


def chain(k: int) -> TokenTree:
    """The linear tree: k first choices in a row."""
    return build_tree([(0,) * d for d in range(1, k + 1)])


def topk_per_depth(widths: list[int], max_nodes: int = 256) -> TokenTree:
    """A static tree from per-depth top-k choices: every node at depth d has the top widths[d] children."""
    level, nodes = [()], []
    for w in widths:
        if len(nodes) + len(level) * w > max_nodes:           # refused before it is built: "1000,1000,1000"
            raise VerispecError(f"a token tree of widths {','.join(map(str, widths))} exceeds the limit of "
                                f"{max_nodes} nodes")
        level = [p + (r,) for p in level for r in range(w)]
        nodes += level
    return build_tree(nodes, max_nodes=max_nodes)


def parse_tree(spec: str, max_nodes: int = 256) -> TokenTree:
    """A tree from the command line: per-depth widths such as "2,2,1,1", or a JSON file of choice-rank paths."""
    import json
    from pathlib import Path
    if Path(spec).is_file():
        try:
            paths = json.loads(Path(spec).read_text())
            if not isinstance(paths, list) or not all(
                    isinstance(p, list) and all(type(r) is int for r in p) for p in paths):
                raise ValueError("expected a JSON list of paths of integer ranks, such as [[0], [1], [0, 0]]")
        except (OSError, ValueError) as e:
            raise VerispecError(f"cannot read tree file {spec}: {e}") from None
        return build_tree(paths, max_nodes=max_nodes)
    try:
        widths = [int(w) for w in spec.split(",")]
    except ValueError:
        raise VerispecError(f"--tree takes per-depth widths such as 2,2,1,1 or a JSON file, got {spec!r}") from None
    if not widths or min(widths) < 1:
        raise VerispecError(f"tree widths must be >= 1, got {spec!r}")
    return topk_per_depth(widths, max_nodes=max_nodes)


def tree_from_acceptance(acceptance: list[list[float]], max_nodes: int) -> tuple[TokenTree, float]:
    """The `max_nodes`-node tree with the most expected accepted tokens, and that expectation.

    acceptance[d][r]: measured probability that the proposer's rank-r choice at depth d + 1 is the target's
    token, given the path to it was right. Taking acceptances along a path as independent, node (r1, ..., rd)
    is reached with probability prod_i acceptance[i][r_i]; the expected number of accepted draft tokens is the
    sum over the tree's nodes. A child is never likelier than its parent, so growing the tree best-first keeps
    every node's parent in it.
    """
    import heapq
    frontier = [(-acceptance[0][r], (r,)) for r in range(len(acceptance[0]))]
    heapq.heapify(frontier)
    nodes = []
    while frontier and len(nodes) < max_nodes:
        neg, path = heapq.heappop(frontier)
        nodes.append(path)
        if len(path) < len(acceptance):
            for r, a in enumerate(acceptance[len(path)]):
                heapq.heappush(frontier, (neg * a, path + (r,)))
    tree = build_tree(nodes, max_nodes=max_nodes)
    return tree, expected_accepted(tree, acceptance)


def expected_accepted(tree: TokenTree, acceptance: list[list[float]]) -> float:
    """E[accepted draft tokens] of any tree under measured per-depth, per-rank acceptance (as above)."""
    return sum(node_reach(tree, acceptance).values())


def node_reach(tree: TokenTree, acceptance: list[list[float]]) -> dict[tuple[int, ...], float]:
    """Per node (by its path of choice ranks), the chance a cycle's accepted path holds it: the product of its
    ranks' acceptances along the path (as above; 0 past the measured depths or ranks)."""
    reach = {}
    for c in tree.choices:
        p = 1.0
        for d, r in enumerate(c):
            p *= acceptance[d][r] if d < len(acceptance) and r < len(acceptance[d]) else 0.0
        reach[c] = p
    return reach


def depth_reach(tree: TokenTree, reach: dict[tuple[int, ...], float]) -> list[float]:
    """Per depth d = 1 .. tree.depth, the chance a cycle's accepted path gets d deep: the sum over the depth's
    nodes of each node's chance (`reach`, per node path, as `node_reach` gives). A tree cut to depth k keeps the
    first k."""
    out = [0.0] * tree.depth
    for c in tree.choices:
        out[len(c) - 1] += reach.get(c, 0.0)
    return out


def ladder(tree: TokenTree, reach: dict[tuple[int, ...], float]) -> list[TokenTree]:
    """The tree's nested subtrees of 1 to 8 nodes, then 12, 16, 24, 32, 48 ..., and all its nodes, each the
    likeliest nodes by `reach` (per node path): the likeliest subtree of each size, as `tree_from_acceptance` grows
    its trees. A child is never likelier than its parent, and ties go to the shallower node, so each subtree keeps
    every node's parent. (A few sizes, not every one: a graphed device records a draft per shape.)"""
    order = sorted(tree.choices, key=lambda c: (-reach.get(c, 0.0), len(c), c))
    sizes = set(range(1, 9)) | {m for i in range(3, 9) for m in (2 ** i, 3 * 2 ** (i - 1))} | {len(order)}
    return [_subtree(tuple(sorted(order[:n], key=lambda c: (len(c), c)))) for n in sorted(sizes) if n <= len(order)]


@lru_cache(maxsize=512)
def _subtree(choices: tuple[tuple[int, ...], ...]) -> TokenTree:
    return build_tree(list(choices))
