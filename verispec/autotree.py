"""Automatic k for token trees: each cycle, verify a tree (or the cut of it predicted fastest) or decode plainly.

`AutoTree` gates a tree whole (a dynamic tree, or a static one with a grafted n-gram path); `AutoCut` cuts a
static tree each cycle to the subtree that pays. Both, and `autok.AutoK` for chains, fall back to plain decoding
and probe now and then (`Probing`). `autok.CostProfile` builds them from a machine's measured costs.
"""
from __future__ import annotations

from typing import Callable

RATE_FLOOR = 0.05    # the least prior acceptance `AutoCut` gives a depth


def by_depth_rates(reach: list[float]) -> list[float]:
    """Per depth d, the chance a path that reached depth d - 1 goes on to d, from `reach` (the chance a cycle's
    accepted path gets d deep, d = 1 ...)."""
    return [r / before if before > 0 else 0.0 for r, before in zip(reach, [1.0] + reach[:-1])]


class Probing:
    """Fall back to plain decoding (k = 0) when speculation is predicted to lose; probe now and then.

    After `probe_every` plain cycles one speculative probe keeps the estimate alive; each probe that leaves the
    choice at plain decoding doubles the wait before the next (up to `max_probe_every`)."""

    def __init__(self, probe_every: int, max_probe_every: int, margin: float,
                 catch_up: Callable[[int], float] | None = None):
        self.base_probe_every, self.max_probe_every, self.probe_every = probe_every, max_probe_every, probe_every
        self.margin, self.catch_up = margin, catch_up     # catch_up(n): plain steps for a draft model to read n tokens
        self.idle = 0

    def repays(self, behind: int, remaining: int | None, gain: float) -> bool:
        """Whether speculating at the predicted `gain` over the `remaining` tokens saves more target steps than
        the catch-up it forces first: a draft model reads the `behind` tokens it has not seen (at the start, the
        whole prompt) before it drafts. A long prompt and a short answer: decode plainly (the pair drafted by its
        0.5B on a 1,123-token prompt, 64 new tokens: a 4.1 s catch-up, 0.77x plain)."""
        if self.catch_up is None or remaining is None or behind <= 2:
            return True
        return remaining * (1 - 1 / gain) >= self.catch_up(behind)

    def _gate(self, k: int, probe_k: int, may_probe: bool = True) -> int:
        if k == 0:
            if self.idle < 0:             # the last cycle was a probe, and it did not pay: wait longer next time
                self.probe_every = min(2 * self.probe_every, self.max_probe_every)
                self.idle = 0
            self.idle += 1
            if self.idle >= self.probe_every and may_probe:
                self.idle = -1
                return probe_k
            return 0
        self.idle, self.probe_every = 0, self.base_probe_every
        return k


class AutoTree(Probing):
    """The same decision for a token tree: verify it (k = its depth) or decode plainly (k = 0).

    Predicted speedup (1 + m) / C: m a running mean of accepted tokens per tree cycle, starting from the tree's
    expected yield (measured at temperature 0) and following what this request accepts: at higher temperatures
    deterministic candidates are accepted less often, and the gate closes. C is the cost of a cycle: fixed, or with
    `cost_of` a running mean of T(1 + n)/T(1) + c for the n nodes each cycle verified, from the tree alone at first
    (a grafted n-gram path adds nodes, and cost, only where the context repeats; a lookup chain verified in the
    tree's place costs its own length). No margin by default: c here is the per-cycle cost measured in situ,
    overheads included (the chain model's c is per token and misses the per-cycle ones, hence MARGIN there); the
    profile predicted Medusa within 4%. At T > 0 the engine asks for MARGIN too: c and the verify costs are measured
    greedy, and sampling at every node of a tree costs more. A tree's yield per cycle (0, 1, 2 ... tokens) is
    noisier than one chain token's acceptance, hence a longer memory."""

    def __init__(self, cost: float, depth: int, prior_accepted: float, prior_weight: float = 8.0,
                 forget: float = 0.95, probe_every: int = 8, max_probe_every: int = 64, margin: float = 0.0,
                 cost_of: Callable[..., float] | None = None, catch_up: Callable[[int], float] | None = None,
                 open_k: int | None = None):
        super().__init__(probe_every, max_probe_every, margin, catch_up)
        self.depth, self.forget, self.cost_of = depth, forget, cost_of
        self.open_k = open_k or depth                    # the k of a verified cycle (a probe's too)
        self.total, self.spent, self.weight = prior_accepted * prior_weight, cost * prior_weight, prior_weight

    @property
    def mean_accepted(self) -> float:
        return self.total / self.weight

    @property
    def cost(self) -> float:
        """The running mean of a cycle's cost, in plain steps."""
        return self.spent / self.weight

    def next_k(self, behind: int = 0, remaining: int | None = None) -> int:
        gain = (1 + self.mean_accepted) / self.cost
        k = self.open_k if gain >= 1 + self.margin and self.repays(behind, remaining, gain) else 0
        # a probe after idling: only if even every path accepted whole would repay the catch-up it forces
        return self._gate(k, self.open_k, k > 0 or self.repays(behind, remaining, (1 + self.depth) / self.cost))

    def update(self, checked: int, accepted: int, nodes: int | None = None, drafted: bool = True) -> None:
        """A verified cycle: `accepted` of its tree's `nodes` draft nodes were kept; `drafted` False: a lookup
        chain verified in the tree's place, which cost no drafting (`cost_of` charges it no c)."""
        if checked == 0:
            return
        spent = self.cost if nodes is None or self.cost_of is None else self.cost_of(nodes, drafted)
        self.total = self.forget * self.total + accepted
        self.spent = self.forget * self.spent + spent
        self.weight = self.forget * self.weight + 1


class AutoCut(Probing):
    """A static tree, cut each cycle to the subtree predicted fastest, or plain decoding (k = 0).

    The cuts are nested subtrees: the tree cut to depth 1, 2 ...; or, for heads' trees measured per node, their
    likeliest 1, 2 ... nodes (`tree.ladder`). Each depth d has a running conditional acceptance a_d (a path that
    reached depth d - 1 goes on to d), older cycles fading, shrunk toward its prior `rates[d - 1]` (the whole
    tree's) scaled by how this request's tries at every depth fared against their priors, pooled. So a depth below
    the cuts verified so far follows what the shallower depths accept, and a cut can grow deeper when they accept
    more than the prior said. A cut whose prior rate at depth d is r (`cut_rates`) goes on there at r / rates[d - 1]
    times a_d, and its tries count at that share. Cut j yields 1 + the sum over its depths of the product of its
    rates to there, for `costs[j]` plain steps (verification and drafting): the best ratio is verified if it wins
    by the margin, and `next_k` gives its depth. After idling, a probe verifies the first cut, the cheapest.
    Where rows are dear the whole tree never pays, and gating it whole lost twice: the gate stayed shut where a
    smaller cut pays, and each probe verified every node (draft-tree 0.95x plain in bf16 on an AVX-512 CPU without
    AMX, a verified row 0.13-0.16 plain steps; session 61). Cut by depth only, a 16-node Medusa tree with 8 nodes
    at depth 1 still ran 0.98x plain there (session 62)."""

    def __init__(self, costs: list[float], rates: list[float], prior_weight: float = 4.0, forget: float = 0.9,
                 probe_every: int = 8, max_probe_every: int = 64, margin: float = 0.0,
                 catch_up: Callable[[int], float] | None = None, cut_rates: list[list[float]] | None = None,
                 trees: list | None = None):
        """costs[j], cut_rates[j] (default: `rates` to depth j + 1) and trees[j]: cut j's cycle cost, its prior
        rates per depth, and its tree (what `tree_for` hands the proposer; `CostProfile.tree_chooser` gives them)."""
        super().__init__(probe_every, max_probe_every, margin, catch_up)
        if cut_rates is None:                            # cut j: the tree cut to depth j + 1
            if len(rates) != len(costs):
                raise ValueError(f"AutoCut: {len(costs)} cuts' costs but {len(rates)} prior rates")
            cut_rates = [rates[:j] for j in range(1, len(rates) + 1)]
        if len(cut_rates) != len(costs) or any(not r or len(r) > len(rates) for r in cut_rates):
            raise ValueError(f"AutoCut: {len(costs)} cuts' costs but {len(cut_rates)} cuts' rates")
        self.costs, self.depth, self.forget = list(costs), len(rates), forget   # costs[j]: cut j's cycle
        self.trees = trees
        self.depths = [len(r) for r in cut_rates]         # cut j's depth
        # what some cut would gain with every path of it accepted whole: whether a probe can repay a catch-up
        self.best_case = max((1 + d) / cost for d, cost in zip(self.depths, self.costs))
        # a depth's prior is never quite 0 (measured so, or past the heads' measured depths): a request that
        # accepts more than the prior said can still grow the cut to it
        floor = lambda rs: [min(max(r, RATE_FLOOR), 1.0) for r in rs]  # noqa: E731
        self.rates, self.weight = floor(rates), prior_weight
        # (the shares from the rates as measured: floored, a cut whose rate is below the floor would bias a_d)
        self.shares = [[r / base if base > 0 else 1.0 for r, base in zip(rs, rates)] for rs in cut_rates]
        self.hits = [0.0] * self.depth        # per depth: paths that went on, faded
        self.tries = [0.0] * self.depth       # per depth: paths that reached the depth before it, at their cuts'
                                              # shares of the whole tree's rate, faded
        mean = sum(self.rates) / self.depth
        self.pool = [mean * prior_weight] * 2  # all depths' hits and their priors' expected hits, with the prior
        self.chosen = 0                        # the cut of the last `next_k`

    def _rates_now(self) -> list[float]:
        """Per depth, the whole tree's running conditional acceptance a_d."""
        scale = self.pool[0] / self.pool[1]
        return [(hit + min(1.0, rate * scale) * self.weight) / (tried + self.weight)
                for hit, tried, rate in zip(self.hits, self.tries, self.rates)]

    def reach(self, cut: int | None = None, now: list[float] | None = None) -> list[float]:
        """The chance that a cycle's accepted path reaches depth d, for d = 1 .. the cut's depth (the last cut,
        the whole tree, by default)."""
        out, p = [], 1.0
        for a, share in zip(now or self._rates_now(), self.shares[-1 if cut is None else cut]):
            p *= min(1.0, share * a)
            out.append(p)
        return out

    def gains(self) -> list[float]:
        """The predicted speedup of each cut."""
        now = self._rates_now()
        return [(1 + sum(self.reach(j, now))) / cost for j, cost in enumerate(self.costs)]

    def next_k(self, behind: int = 0, remaining: int | None = None) -> int:
        gains = self.gains()
        j = max(range(len(gains)), key=gains.__getitem__)
        k = self.depths[j]
        if gains[j] < 1 + self.margin or not self.repays(behind, remaining, gains[j]):
            k = 0
        self.chosen = j if k else 0                      # a probe verifies the first cut
        # a probe after idling: only if the best case would repay the catch-up it forces
        return self._gate(k, self.depths[0], k > 0 or self.repays(behind, remaining, self.best_case))

    def tree_for(self, k: int):
        """The tree to verify after `next_k` gave k (or less, where the budget cuts it): the chosen cut, no deeper
        than k."""
        return self.trees[self.chosen].cut(k)

    def update(self, checked: int, accepted: int, nodes: int | None = None, drafted: bool = True) -> None:
        """A verified cycle of the chosen cut: depths 1 .. `checked` were tried, the first `accepted` held. A
        lookup chain verified in the tree's place (`drafted` False) says nothing of the tree."""
        if checked == 0 or not drafted:
            return
        shares = self.shares[self.chosen]
        if checked > len(shares):       # deeper than the chosen cut (cuts by depth: the caller's own): the first
            shares = next((s for s in self.shares if len(s) >= checked), self.shares[-1])   # cut that deep
        for d in range(min(checked, len(shares))):
            self.hits[d] = self.forget * self.hits[d] + (d < accepted)
            self.tries[d] = self.forget * self.tries[d] + shares[d]
        self.pool = [self.forget * self.pool[0] + min(accepted, checked),
                     self.forget * self.pool[1] + sum(s * r for s, r in zip(shares[:checked], self.rates))]
