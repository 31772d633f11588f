"""Automatic k: each cycle, the draft length that maximises predicted speedup for this request.

The prediction is `theory.speedup(alpha, k, c, T)`: the cost curve T(n)/T(1) and the draft step cost c come from a
measured profile (`verispec profile`), alpha from a running estimate for the request at hand: a Beta prior centred
on the method's profiled alpha, updated after every cycle with the draft tokens checked and accepted, older cycles
fading geometrically so the estimate follows the text. When no k is predicted to win by more than MARGIN, k = 0
(plain decoding); after `probe_every` such cycles one k = 1 probe keeps the estimate alive, and each probe
that leaves the choice at k = 0 doubles the wait before the next (up to `max_probe_every`): on text where drafts
keep failing, probing fades to a few cycles in a hundred.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from .autotree import AutoCut, AutoTree, Probing, by_depth_rates
from .errors import VerispecError
from .theory import best_k, cost_ratio, expected_tokens, monotone_curve, speedup
from .tree import depth_reach, ladder

DEFAULT_ALPHA = {"ngram": 0.45, "draft": 0.55}
CHAIN_OF = {"draft-tree": "draft"}   # a tree method drafted by a chain method's model: its alpha and c per token
# Speculate only where the formula predicts a gain above 10%: it does not see per-cycle overheads (sampling over
# the vocabulary at several positions, the draft's catch-up pass, Python), which cost a few percent of a step
# here. Without the margin, auto lost 9% on random-token prompts at T = 1.5 with the draft (alpha 0.26).
MARGIN = 0.10


def number(v, what: str, most: float = float("inf")) -> float:
    """A profile's value read from JSON: a finite number in [0, most]; ValueError naming `what` otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= most or v == float("inf"):
        raise ValueError(f"{what} = {v!r} is not a finite number in [0, {most}]")
    return float(v)


def table(raw, what: str, key=int, most: float = float("inf"), value=float) -> dict:
    """A profile's table read from JSON: an object whose keys are `key`s (ints: at least 1) and whose values are
    finite numbers in [0, most] (`value` reads them); ValueError naming `what` otherwise."""
    if not isinstance(raw, dict):
        raise ValueError(f"{what} is not an object")
    out = {}
    for k, v in raw.items():
        try:
            k = key(k)
        except ValueError:
            raise ValueError(f"{what} has key {k!r}, not {'an integer' if key is int else 'text'}") from None
        if key is int and k < 1:
            raise ValueError(f"{what} has key {k}, not >= 1")
        out[k] = number(v, f"{what}[{k}]", most) if value is float else value(v)
    return out


def cost_table(raw, what: str, empty: bool = False, from_one: bool = False) -> dict[int, float]:
    """A cost curve read from JSON: T(n)/T(1) per n >= 1, each a positive finite number (and some, unless `empty`;
    with `from_one`, n = 1 among them: a chain's curve)."""
    out = table(raw, what)
    if not out and not empty:
        raise ValueError(f"{what} is empty")
    if 0 in out.values():
        raise ValueError(f"{what} holds a cost of 0")
    if from_one and 1 not in out:
        raise ValueError(f"{what} has no cost for 1 token (T(1)/T(1) = 1)")
    return out


@dataclass
class CostProfile:
    curve: dict[int, float] = field(default_factory=lambda: {n: 1 + 0.045 * (n - 1) for n in range(1, 17)})
    draft_cost: dict[str, float] = field(default_factory=lambda: {"ngram": 0.002, "draft": 0.07})
    alpha: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_ALPHA))
    measured: bool = False     # False: the built-in defaults (a bf16 CPU profile of the default model)
    meta: dict = field(default_factory=dict)
    tree_curve: dict[int, float] = field(default_factory=dict)   # tree of n nodes (+ root): T(n + 1)/T(1)
    # batches of B sequences (serving): batch_curve[B][n] = T_B(n)/T_B(1), a packed pass of n tokens per
    # sequence against one token per sequence; batch_scale[B] = T_B(1)/T_1(1)
    batch_curve: dict[int, dict[int, float]] = field(default_factory=dict)
    batch_scale: dict[int, float] = field(default_factory=dict)

    def __post_init__(self):
        self.curve = monotone_curve(self.curve)
        self.tree_curve = monotone_curve(self.tree_curve) if self.tree_curve else {}
        self.batch_curve = {b: monotone_curve(row) for b, row in self.batch_curve.items()}

    def batch_costs(self, method: str, batch: int, drafts_together: bool = False) -> tuple[float, dict[int, float]]:
        """(c, curve) for one sequence of a batch of `batch`, from the smallest measured batch size >= it (the
        largest measured, beyond them). The target pass is shared, so the curve is the batch's. Drafting one
        sequence at a time costs B times c T_1(1) per step, so relative to the shared pass c grows as
        B T_1(1)/T_B(1); drafts run together (packed draft passes) scale about as the target's pass does, and c
        stays as measured for one sequence."""
        c = self.draft_cost.get(method, 0.05)
        if batch <= 1 or not self.batch_curve:
            return c, self.curve
        b = min((m for m in self.batch_curve if m >= batch), default=max(self.batch_curve))
        return (c if drafts_together else c * batch / self.batch_scale[b]), self.batch_curve[b]

    def _cycle_cost(self, c: float) -> Callable[..., float]:
        """A tree cycle's cost in plain steps for the n nodes it verified: T(1 + n)/T(1), plus the drafting c unless
        nothing was drafted (a lookup chain verified in the tree's place)."""
        return lambda n, drafted=True: self.tree_cost(n) + (c if drafted else 0.0)

    def tree_cost(self, nodes: int) -> float:
        """T(1 + nodes)/T(1) for a token tree: interpolated from the measured tree sizes, else the chain curve.
        Below the smallest measured tree, the chain curve's 1 + nodes rows: trees of 1-3 nodes cost what chains of
        2-4 tokens cost, within 5%, and not the line from a plain step to the 4-node tree (the Qwen 1.5B on an
        AVX2-only CPU: 1.25 steps for one node, the chain 1.17, the line 1.35; session 51)."""
        if not self.tree_curve or (nodes < min(self.tree_curve) and self.curve):
            return cost_ratio(self.curve, nodes + 1)
        points = sorted({0: 1.0, **self.tree_curve}.items())
        for (n0, v0), (n1, v1) in zip(points, points[1:]):
            if nodes <= n1:
                return v0 + (v1 - v0) * (nodes - n0) / (n1 - n0)
        (n0, v0), (n1, v1) = points[-2], points[-1]
        return v1 + (v1 - v0) * (nodes - n1) / (n1 - n0)

    @classmethod
    def load(cls, path: str | Path) -> "CostProfile":
        try:
            d = json.loads(Path(path).read_text())
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
            meta = d.get("meta", {})
            if not isinstance(meta, dict):
                raise ValueError("meta is not an object")
            batch = {b: cost_table(row, f"batch_curve[{b}]", from_one=True) for b, row in
                     table(d.get("batch_curve", {}), "batch_curve", int, value=lambda row: row).items()}
            scale = cost_table(d.get("batch_scale", {}), "batch_scale", empty=True)
            if set(batch) != set(scale):
                raise ValueError("batch_curve and batch_scale measure other batch sizes")
            if not isinstance(d.get("measured", True), bool):
                raise ValueError("measured is not true or false")
            return cls(cost_table(d["curve"], "curve", from_one=True), table(d["draft_cost"], "draft_cost", str),
                       table(d["alpha"], "alpha", str, 1.0), d.get("measured", True), meta,
                       cost_table(d.get("tree_curve", {}), "tree_curve", empty=True), batch, scale)
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            raise VerispecError(f"cannot read profile {path}: {e}") from None

    def save(self, path: str | Path) -> None:
        from .files import atomic_file
        with atomic_file(path) as f:
            json.dump({**asdict(self), "curve": {str(n): v for n, v in self.curve.items()},
                       "tree_curve": {str(n): v for n, v in self.tree_curve.items()},
                       "batch_curve": {str(b): {str(n): v for n, v in row.items()}
                                       for b, row in self.batch_curve.items()},
                       "batch_scale": {str(b): v for b, v in self.batch_scale.items()}}, f, indent=1)

    def chooser(self, method: str, k_max: int = 12) -> "AutoK":
        return AutoK(self.draft_cost.get(method, 0.05), self.curve, self.alpha.get(method, 0.5), k_max=k_max)

    def chooser_for(self, proposer, k_max: int, sampled: bool) -> "AutoK | AutoTree | AutoCut | None":
        """Auto k's chooser for one request to `proposer` (`proposers.base.Proposer`), k at most `k_max`: a
        chain's k (`chooser`); a static tree cut each cycle, or with a grafted n-gram path gated whole
        (`tree_chooser`); a dynamic tree gated whole (`dynamic_tree_chooser`); None for a static tree with no
        prior yield. `sampled` (T > 0): a choice must win by MARGIN, for sampling at every node costs what the
        greedy measurements did not see."""
        margin = MARGIN if sampled else 0.0
        tree, expected = proposer.tree, proposer.expected_accepted
        if not proposer.makes_trees:
            return self.chooser(proposer.name, k_max)
        if tree is None:     # verify its nodes, at most k_max deep, or decode plainly
            return self.dynamic_tree_chooser(proposer.name, proposer.max_nodes - proposer.graft, k_max, expected,
                                             margin)
        if expected is None and proposer.name not in CHAIN_OF:
            return None
        # (with a grafted n-gram path, an open gate asks for k_max: a lookup chain verified in the tree's place
        # may run that long, as it does without auto k)
        return self.tree_chooser(proposer.name, tree.cut(k_max), expected, margin, k_max if proposer.graft else None,
                                 tree.depth, proposer.node_reach, proposer.drafts_by_depth)

    def dynamic_tree_chooser(self, method: str, nodes: int, depth: int, expected_accepted: float | None = None,
                             margin: float = 0.0) -> "AutoTree":
        """A tree built anew each cycle (EAGLE-2): verify its `nodes` nodes, at most `depth` deep, or decode
        plainly. Its prior yield is `expected_accepted` (the proposer's, from its head's measured acceptance), else
        the best chain's at the method's profiled alpha (a tree holds that chain). c is per cycle."""
        if expected_accepted is None:
            a = min(self.alpha.get(method, 0.5), 0.999)
            expected_accepted = sum(a ** i for i in range(1, depth + 1))  # E[accepted] of a depth-long chain
        c = self.draft_cost.get(method, 0.05)
        return AutoTree(self.tree_cost(nodes) + c, depth, expected_accepted, margin=margin,
                        cost_of=self._cycle_cost(c))

    def tree_chooser(self, method: str, tree, expected_accepted: float | None = None,
                     margin: float = 0.0, open_k: int | None = None,
                     full_depth: int | None = None, reach: dict[tuple[int, ...], float] | None = None,
                     by_depth: bool = True) -> "AutoTree | AutoCut":
        """The static `tree`, cut each cycle to the subtree that pays (`AutoCut`), or plain decoding. Heads' trees
        with a measured `reach` per node (the chance a cycle's accepted path holds it) are cut to their likeliest
        1, 2 ... nodes (`tree.ladder`), each depth's prior acceptance their reach's; a draft model's tree
        (`CHAIN_OF`) is cut by depth, its prior the method's chain alpha at every depth (the tree holds that
        chain). A cut's drafting: `by_depth`, one pass per depth (a draft model, EAGLE's head): the measured
        cycle's share per depth of `full_depth` (the uncut tree's depth, default `tree`'s), or, where the profile
        has no per-cycle cost for a draft model's tree, the chain's per-token c; else the whole cycle's c (Medusa's
        heads run at once). With a grafted n-gram path (`open_k`: the k a verified cycle asks for, which only its
        lookup chains can use), or no prior per node, the tree is verified whole or not at all (`AutoTree`), its
        prior yield `expected_accepted`, else the chain's at the chain's alpha."""
        chain = CHAIN_OF.get(method, method)
        c = self.draft_cost.get(method)
        per_token = self.draft_cost.get(chain, 0.05) if method in CHAIN_OF else None
        catch_up = None if per_token is None else lambda n: per_token * cost_ratio(self.curve, n)
        a = min(self.alpha.get(chain, DEFAULT_ALPHA.get(chain, 0.5)), 0.999)
        if open_k is None and (reach is not None or method in CHAIN_OF):
            if reach is None:
                cuts, rates = [tree.cut(k) for k in range(1, tree.depth + 1)], [a] * tree.depth
                cut_rates = None
            else:
                cuts, rates = ladder(tree, reach), by_depth_rates(depth_reach(tree, reach))
                cut_rates = [by_depth_rates(depth_reach(cut, reach)) for cut in cuts]
            whole = 0.05 if c is None else c
            if by_depth:      # k passes: the measured cycle's share per depth, else the draft chain's per token
                per_depth = per_token if c is None and per_token is not None else whole / (full_depth or tree.depth)
                drafting = [cut.depth * per_depth for cut in cuts]
            else:             # every head in one pass, whatever the cut
                drafting = [whole] * len(cuts)
            costs = [self.tree_cost(cut.size) + d for cut, d in zip(cuts, drafting)]
            return AutoCut(costs, rates, margin=margin, catch_up=catch_up, cut_rates=cut_rates, trees=cuts)
        if expected_accepted is None:
            expected_accepted = sum(a ** i for i in range(1, tree.depth + 1))
            if c is None:
                c = tree.depth * self.draft_cost.get(chain, 0.05)
        c = 0.05 if c is None else c
        # a cycle costs what it verified: the tree, a grafted n-gram path's nodes where the context repeats, or
        # a lookup chain in the tree's place
        return AutoTree(self.tree_cost(tree.size) + c, tree.depth, expected_accepted, margin=margin,
                        cost_of=self._cycle_cost(c),
                        open_k=open_k, catch_up=catch_up)


class AutoK(Probing):
    def __init__(self, c: float, curve: dict[int, float], prior_alpha: float, prior_weight: float = 4.0,
                 forget: float = 0.9, k_max: int = 12, probe_every: int = 8, max_probe_every: int = 64,
                 margin: float = MARGIN):
        super().__init__(probe_every, max_probe_every, margin, lambda n: c * cost_ratio(curve, n))
        self.c, self.curve, self.k_max, self.forget = c, curve, k_max, forget
        self.accepted = prior_alpha * prior_weight
        self.rejected = (1 - prior_alpha) * prior_weight

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def next_k(self, behind: int = 0, remaining: int | None = None) -> int:
        """k for the next cycle; `behind`: tokens the proposer must catch up on first (`Proposer.behind`);
        `remaining`: tokens this request may still generate (None: unbounded)."""
        k = best_k(self.alpha, self.c, self.curve, self.k_max)
        gain = speedup(self.alpha, k, self.c, self.curve)
        if k and (gain < 1 + self.margin or not self.repays(behind, remaining, gain)):
            k = 0
        return self._gate(k, 1, k > 0 or self.catch_up_pays(behind, remaining))

    def catch_up_pays(self, behind: int, remaining: int | None = None) -> bool:
        """Whether a probe after idling can pay for the catch-up it forces: a draft model that sat idle reads the
        `behind` tokens in one pass, about c * T(behind)/T(1) target steps (its cost curve taken as the target's),
        spread over the probe interval's cycles. Probe only if even drafts always accepted would then gain more
        than the margin; else stay plain and stop paying catch-ups (on the 1.5B drafted by the 0.5B, whose
        c = 0.67, probes that re-read the whole prompt cost 10% of plain speed); nor where drafting at that best
        case for the `remaining` tokens would not repay the catch-up (`repays`)."""
        if behind <= 2:
            return True
        extra = self.catch_up(behind) / max(1, self.probe_every)
        best = max(expected_tokens(1.0, k) / (k * self.c + cost_ratio(self.curve, k + 1))
                   for k in range(1, self.k_max + 1))
        return self.repays(behind, remaining, best) and any(
            expected_tokens(1.0, k) / (k * self.c + cost_ratio(self.curve, k + 1) + extra) >= 1 + self.margin
            for k in range(1, self.k_max + 1))

    def update(self, checked: int, accepted: int, nodes: int | None = None, drafted: bool = True) -> None:
        if checked == 0:
            return
        self.accepted = self.forget * self.accepted + accepted
        self.rejected = self.forget * self.rejected + (checked - accepted)
