"""The cost model against hand-computed values, and the k chooser on synthetic profiles."""
import pytest

from verispec.theory import best_k, cost_ratio, expected_tokens, speedup, truncated_geometric


@pytest.mark.parametrize("alpha,tokens,gain", [(0.75, 3.05, 2.18), (0.9, 4.10, 2.93), (0.5, 1.94, 1.38)])
def test_textbook_values_k4_c01(alpha, tokens, gain):
    assert expected_tokens(alpha, 4) == pytest.approx(tokens, abs=0.005)
    assert speedup(alpha, 4, 0.1) == pytest.approx(gain, abs=0.005)


def test_edge_cases():
    assert expected_tokens(1.0, 4) == 5 and expected_tokens(0.0, 4) == 1
    assert speedup(0.8, 0, 0.5) == 1.0
    with pytest.raises(ValueError):
        expected_tokens(1.5, 2)


def test_measured_cost_curve_replaces_free_verification():
    curve = {1: 1.0, 2: 1.1, 3: 1.2, 4: 1.3, 5: 1.5}
    assert speedup(0.75, 4, 0.1, curve) == pytest.approx(3.05078125 / (0.4 + 1.5))
    assert cost_ratio(curve, 7) == pytest.approx(1.5 + 2 * 0.125)        # linear past the measured end


def test_k_chooser_returns_zero_when_drafting_is_too_dear():
    assert best_k(0.6, c=0.7) == 0
    assert best_k(0.0, c=0.0, curve={1: 1.0, 2: 1.05}) == 0


@pytest.mark.parametrize("alpha,c", [(0.5, 0.02), (0.8, 0.05), (0.95, 0.01), (0.7, 0.2)])
def test_k_chooser_is_the_argmax_of_the_formula(alpha, c):
    curve = {n: 1 + 0.04 * (n - 1) for n in range(1, 18)}
    k = best_k(alpha, c, curve, k_max=16)
    assert all(speedup(alpha, k, c, curve) >= speedup(alpha, j, c, curve) for j in range(17))
    assert k > 0


def test_truncated_geometric_sums_to_one_and_matches_mean():
    p = truncated_geometric(0.7, 5)
    assert sum(p) == pytest.approx(1.0)
    assert sum(n * q for n, q in enumerate(p)) + 1 == pytest.approx(expected_tokens(0.7, 5))


def test_auto_k_drops_to_plain_when_drafts_fail_and_probes_again():
    from verispec.autok import AutoK
    curve = {n: 1 + 0.05 * (n - 1) for n in range(1, 17)}
    auto = AutoK(c=0.06, curve=curve, prior_alpha=0.6, probe_every=4)
    assert auto.next_k() > 1
    for _ in range(15):                     # every first draft token rejected: alpha far below break-even
        auto.update(checked=1, accepted=0)
    assert auto.alpha < 0.11                # k = 1 pays only above c + T(2)/T(1) - 1 = 0.11
    ks = [auto.next_k() for _ in range(4)]
    assert ks == [0, 0, 0, 1]               # plain decoding, then a k = 1 probe after 4 cycles
    for _ in range(10):                     # the text turns predictable
        auto.update(checked=4, accepted=4)
    assert auto.next_k() >= 6


def test_auto_k_charges_a_costly_drafts_catch_up_to_its_probes():
    """A draft model idle for a while must read what it missed before it can draft again. Where that catch-up
    cannot pay even if every draft were accepted (c = 0.67 and a steep verify curve: the Qwen pair in gguf-q8),
    auto k stays plain instead of probing; a short backlog, or a cheap draft, still probes as before."""
    from verispec.autok import AutoK
    curve = {n: 1 + 0.3 * (n - 1) for n in range(1, 17)}
    costly = AutoK(c=0.67, curve=curve, prior_alpha=0.95, probe_every=4)
    assert costly.next_k(0) == 0                     # predicted gain below the margin: plain decoding
    assert [costly.next_k(40 + i) for i in range(12)] == [0] * 12          # 40+ tokens behind: never a probe
    assert costly.next_k(1) == 1                      # nothing to catch up on: the overdue probe runs
    cheap = AutoK(c=0.06, curve=curve, prior_alpha=0.01, prior_weight=50, probe_every=4)
    assert [cheap.next_k(40 + i) for i in range(4)] == [0, 0, 0, 1]        # a cheap draft's catch-up pays


def test_auto_k_drafts_only_where_the_answer_repays_the_drafts_reading_of_the_prompt():
    """Before its first draft a draft model reads the whole prompt. On a 1,000-token prompt that costs
    c * T(1000)/T(1) target steps (0.3 * 101 = 30 here); drafting 64 tokens at a predicted 1.36x saves about 17:
    auto k decodes plainly, and no probe forces the catch-up later. With 5,000 tokens to go, or a short prompt, it
    drafts. The same holds for a draft model's tree."""
    from verispec.autok import AutoK, CostProfile
    curve = {n: 1 + 0.1 * (n - 1) for n in range(1, 13)}
    auto = AutoK(c=0.3, curve=curve, prior_alpha=0.8, probe_every=2)
    gain = speedup(0.8, best_k(0.8, 0.3, curve, 12), 0.3, curve)
    assert 1.3 < gain < 1.4 and 64 * (1 - 1 / gain) < 0.3 * cost_ratio(curve, 1000)
    assert [auto.next_k(1000 + i, 64 - i) for i in range(30)] == [0] * 30
    assert AutoK(c=0.3, curve=curve, prior_alpha=0.8).next_k(1000, 5000) > 0
    assert AutoK(c=0.3, curve=curve, prior_alpha=0.8).next_k(50, 64) > 0
    assert AutoK(c=0.3, curve=curve, prior_alpha=0.8).next_k(1000) > 0         # no bound on the answer
    from verispec.tree import topk_per_depth
    prof = CostProfile(curve=curve, tree_curve={4: 1.3, 8: 1.6}, draft_cost={"draft": 0.1}, alpha={"draft": 0.8})
    tree = prof.tree_chooser("draft-tree", topk_per_depth([2, 2, 1, 1, 1]), margin=0.1)   # best cut 1.48x
    assert [tree.next_k(6000 + i, 48 - i) for i in range(30)] == [0] * 30     # 60 steps' catch-up: not even a probe
    assert prof.tree_chooser("draft-tree", topk_per_depth([2, 2, 1, 1, 1])).next_k(3000, 5000) == 2   # best cut


def test_auto_k_probes_less_and_less_while_probes_fail_and_resets_when_drafts_pay():
    from verispec.autok import AutoK
    curve = {n: 1 + 0.05 * (n - 1) for n in range(1, 17)}
    auto = AutoK(c=0.06, curve=curve, prior_alpha=0.01, prior_weight=50, probe_every=4, max_probe_every=16)
    probes = []
    for cycle in range(80):
        k = auto.next_k()
        if k:
            probes.append(cycle)
            auto.update(checked=1, accepted=0)          # every probe fails
    gaps = [b - a for a, b in zip(probes, probes[1:])]
    assert probes[0] == 3 and gaps[:3] == [8, 16, 16] and set(gaps[3:]) == {16}   # 4, then 8, 16, capped
    for _ in range(30):                                 # a probe succeeds, and the text turns predictable
        auto.update(checked=4, accepted=4)
    assert auto.next_k() > 1 and auto.probe_every == 4


def test_profile_round_trip(tmp_path):
    from verispec.autok import CostProfile
    p = CostProfile(curve={1: 1.0, 2: 1.1}, draft_cost={"draft": 0.05}, alpha={"draft": 0.7}, measured=True)
    p.save(tmp_path / "p.json")
    q = CostProfile.load(tmp_path / "p.json")
    assert q.curve == {1: 1.0, 2: 1.1} and q.draft_cost == {"draft": 0.05} and q.measured


def test_noisy_cost_curve_is_made_physical_so_auto_k_can_still_fall_back():
    from verispec.autok import CostProfile
    from verispec.theory import monotone_curve
    noisy = {1: 1.0, 2: 0.81, 3: 0.89, 4: 1.05, 5: 0.98, 6: 1.2}
    assert monotone_curve(noisy) == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.05, 5: 1.05, 6: 1.2}
    auto = CostProfile(curve=noisy, draft_cost={"draft": 0.1}, alpha={"draft": 0.02}).chooser("draft")
    assert auto.next_k() == 0          # with T(2) = 0.81 taken at face value, k = 1 would look like a win


def test_auto_k_needs_a_predicted_gain_above_the_margin():
    from verispec.autok import MARGIN, AutoK
    from verispec.theory import best_k, speedup
    curve = {n: 1 + 0.05 * (n - 1) for n in range(1, 17)}
    for alpha in (0.2, 0.25, 0.3, 0.35, 0.5, 0.8):
        auto = AutoK(c=0.1, curve=curve, prior_alpha=alpha, prior_weight=1e9)
        k = best_k(alpha, 0.1, curve, 12)
        gain = speedup(alpha, k, 0.1, curve)
        assert auto.next_k() == (k if gain >= 1 + MARGIN else 0), alpha


def test_a_draft_models_tree_is_cut_to_the_depth_that_pays():
    """draft-tree has no expected yield of its own: each depth's acceptance starts at the draft's profiled chain
    alpha, and the tree cut to depth k costs its nodes' verification plus k draft passes at the chain's per-token
    c (or the measured cycle's share). The cut with the best predicted speedup is verified, none where none pays;
    where rows are cheap, the whole tree. Before session 61 the tree was gated whole: shut where the chain pays,
    and each probe verified all 18 nodes (draft-tree 0.95x plain where rows are dear)."""
    from verispec.autok import CostProfile
    from verispec.autotree import AutoCut
    from verispec.tree import topk_per_depth
    tree = topk_per_depth([2, 2, 1, 1, 1])                      # 18 nodes, 5 deep: 2, 6, 10, 14, 18 down to each
    curve = {n: 1 + 0.05 * (n - 1) for n in range(1, 17)}
    tree_curve = {4: 1.15, 8: 1.35, 16: 2.0, 32: 3.6}

    def chooser(alpha, draft_cost=None, curves=(curve, tree_curve)):
        prof = CostProfile(curves[0], draft_cost or {"draft": 0.09}, {"draft": alpha}, tree_curve=curves[1])
        return prof, prof.tree_chooser("draft-tree", tree)

    prof, weak = chooser(0.5)
    assert isinstance(weak, AutoCut) and weak.depth == 5
    sizes = [tree.cut(d).size for d in range(1, 6)]
    assert sizes == [2, 6, 10, 14, 18]
    assert [weak.costs[d - 1] for d in range(1, 6)] == pytest.approx([prof.tree_cost(n) + d * 0.09
                                                                    for d, n in enumerate(sizes, 1)])
    assert weak.costs[4] == pytest.approx(2.0 + 2 * (3.6 - 2.0) / 16 + 5 * 0.09)   # the whole tree, as before
    assert weak.reach() == pytest.approx([0.5 ** d for d in range(1, 6)])
    gains = [(1 + sum(0.5 ** i for i in range(1, d + 1))) / weak.costs[d - 1] for d in range(1, 6)]
    assert weak.gains() == pytest.approx(gains)
    assert weak.next_k() == 1 + gains.index(max(gains)) == 1          # the whole tree would lose (gain < 1)
    assert gains[4] < 1
    assert chooser(0.15)[1].next_k() == 0                              # no cut pays: plain decoding
    strong = chooser(0.9)[1]
    assert strong.next_k() == 1 + strong.gains().index(max(strong.gains())) == 3
    cheap = chooser(0.9, curves=({n: 1 + 0.01 * (n - 1) for n in range(1, 17)}, {4: 1.02, 8: 1.04, 16: 1.08}))[1]
    assert cheap.next_k() == 5                                         # rows nearly free: the whole tree
    measured = chooser(0.5, {"draft": 0.09, "draft-tree": 0.3})[1]    # a measured cycle: its share per depth
    assert measured.costs[4] == pytest.approx(weak.costs[4] - 5 * 0.09 + 0.3)
    assert measured.costs[0] == pytest.approx(weak.costs[0] - 0.09 + 0.3 / 5)
    short = CostProfile(curve, {"draft": 0.09, "draft-tree": 0.3}, {"draft": 0.5}, tree_curve=tree_curve).tree_chooser(
        "draft-tree", tree.cut(2), full_depth=5)                       # --k-max 2: the share is still a fifth
    assert short.costs == pytest.approx(measured.costs[:2])
    grafted = CostProfile(curve, {"draft": 0.09}, {"draft": 0.5}, tree_curve=tree_curve).tree_chooser(
        "draft-tree", tree, open_k=12)
    assert not isinstance(grafted, AutoCut)                            # with "+ngram": gated whole, as Medusa's


def test_heads_trees_are_cut_to_their_likeliest_nodes():
    """Medusa's and EAGLE's static trees are cut each cycle to their likeliest nodes, as many as pay (`tree.ladder`;
    session 62 cut them by depth, and a 16-node Medusa tree with 8 nodes at depth 1 still ran 0.98x plain where
    rows are dear). Each cut's prior is the heads' measured chance per node (`tree.node_reach`), and its drafting
    is the whole cycle's c for Medusa (its heads run at once) and its share per depth for EAGLE (a pass a depth)."""
    from verispec.autok import CostProfile
    from verispec.autotree import RATE_FLOOR, AutoCut, AutoTree, by_depth_rates
    from verispec.tree import depth_reach, expected_accepted, ladder, node_reach, topk_per_depth, tree_from_acceptance
    small = topk_per_depth([2, 1])                                   # (0), (1), (0, 0), (1, 0)
    assert node_reach(small, [[0.6, 0.2], [0.5]]) == pytest.approx(
        {(0,): 0.6, (1,): 0.2, (0, 0): 0.3, (1, 0): 0.1})
    assert depth_reach(small, node_reach(small, [[0.6, 0.2], [0.5]])) == pytest.approx([0.8, 0.6 * 0.5 + 0.2 * 0.5])
    acceptance = [[0.7, 0.15, 0.05], [0.6, 0.1], [0.5, 0.1], [0.4]]
    tree, expected = tree_from_acceptance(acceptance, 16)
    reach = node_reach(tree, acceptance)
    assert len(depth_reach(tree, reach)) == tree.depth == 4 and sum(reach.values()) == pytest.approx(expected)
    assert depth_reach(tree.cut(2), reach) == pytest.approx(depth_reach(tree, reach)[:2])   # a cut keeps its depths
    assert expected_accepted(tree, acceptance) == pytest.approx(expected)
    assert by_depth_rates([0.8, 0.4, 0.1]) == pytest.approx([0.8, 0.5, 0.25])
    cuts = ladder(tree, reach)                                       # the likeliest subtree of every size, nested
    assert [c.size for c in cuts] == [1, 2, 3, 4, 5, 6, 7, 8, 12, 16] and cuts[-1].choices == tree.choices
    assert [c.size for c in ladder(tree_from_acceptance(acceptance * 2, 50)[0], {})] == [*range(1, 9), 12, 16, 24,
                                                                                       32, 48, 50]
    for small_cut, big_cut in zip(cuts, cuts[1:]):
        assert set(small_cut.choices) < set(big_cut.choices)
    for cut in cuts:
        assert sum(reach[c] for c in cut.choices) == pytest.approx(tree_from_acceptance(acceptance, cut.size)[1])
    curve = {n: 1 + 0.05 * (n - 1) for n in range(1, 17)}
    dear_rows = {4: 1.5, 8: 2.0, 16: 3.0, 32: 5.0}
    prof = CostProfile(curve, {"medusa": 0.1, "eagle": 0.4}, tree_curve=dear_rows)
    medusa = prof.tree_chooser("medusa", tree, expected, reach=reach, by_depth=False)
    eagle = prof.tree_chooser("eagle", tree, expected, reach=reach)
    assert isinstance(medusa, AutoCut) and medusa.reach() == pytest.approx(depth_reach(tree, reach))
    assert medusa.costs == pytest.approx([prof.tree_cost(cut.size) + 0.1 for cut in cuts])
    assert eagle.costs == pytest.approx([prof.tree_cost(c.size) + 0.4 * c.depth / 4 for c in cuts])
    gains = [(1 + sum(reach[c] for c in cut.choices)) / cost for cut, cost in zip(cuts, medusa.costs)]
    assert medusa.gains() == pytest.approx(gains)
    best = cuts[gains.index(max(gains))]
    k = medusa.next_k()
    assert k == best.depth and medusa.tree_for(k) is best and medusa.tree_for(1).choices == best.cut(1).choices
    assert best.size < tree.size and max(gains) > max((1 + sum(depth_reach(tree, reach)[:d])) /
                                                      (prof.tree_cost(tree.cut(d).size) + 0.1) for d in range(1, 5))
    cheap = CostProfile(curve, {"medusa": 0.1}, tree_curve={4: 1.02, 8: 1.04, 16: 1.08, 32: 1.2})
    whole = cheap.tree_chooser("medusa", tree, expected, reach=reach, by_depth=False)
    assert whole.next_k() == 4 and whole.tree_for(4).choices == tree.choices    # rows nearly free: all of it
    grafted = prof.tree_chooser("medusa", tree, expected, open_k=12, reach=reach, by_depth=False)
    assert isinstance(grafted, AutoTree)                             # with "+ngram": gated whole
    assert isinstance(prof.tree_chooser("medusa", tree, expected), AutoTree)   # no reach: gated whole
    rates = by_depth_rates(depth_reach(tree, reach))
    two = max(j for j, cut in enumerate(cuts) if cut.depth == 2)
    for _ in range(30):                                              # depths 1-2 always accepted, 3-4 untried
        medusa.chosen = two
        medusa.update(checked=2, accepted=2)
    now = medusa.reach()
    assert now[1] > 0.9 and now[3] / now[2] > rates[3]               # untried depths follow the pooled gain
    floored = AutoCut([1.2, 1.4], [0.8, 0.0])        # a depth measured at 0 (or past the measured depths)
    assert floored.rates == [0.8, RATE_FLOOR] and floored.reach()[1] > 0


def test_a_ladder_of_cuts_learns_the_trees_rates_from_any_cut_it_verifies():
    """A cut's tries at a depth count at its share of the whole tree's rate there: a request that accepts just as
    the heads' measured table says keeps every cut's predicted yield at its prior, whichever cuts it verified."""
    import random

    from verispec.autok import CostProfile
    from verispec.tree import ladder, node_reach, tree_from_acceptance
    acceptance = [[0.5, 0.2, 0.1, 0.05], [0.6, 0.15], [0.5, 0.1], [0.4]]
    tree, expected = tree_from_acceptance(acceptance, 16)
    reach = node_reach(tree, acceptance)
    auto = CostProfile(tree_curve={4: 1.3, 8: 1.8, 16: 2.6}, draft_cost={"medusa": 0.1}).tree_chooser(
        "medusa", tree, expected, reach=reach, by_depth=False)
    auto.forget = 1.0                    # no fading: the estimate itself, not its last few cycles' scatter
    cuts, rng = ladder(tree, reach), random.Random(0)
    prior = [1 + sum(reach[c] for c in cut.choices) for cut in cuts]
    for cycle in range(3000):
        auto.chosen = cycle % len(cuts)
        cut, path = cuts[auto.chosen], ()
        while True:                      # the target's token is rank r's with the table's chance, or none
            u, went = rng.random(), None
            for r, a in enumerate(acceptance[len(path)] if len(path) < len(acceptance) else []):
                if u < a:
                    went = path + (r,)
                    break
                u -= a
            if went is None or went not in cut.choices:
                break
            path = went
        auto.update(checked=min(len(path) + 1, cut.depth), accepted=len(path))
    now = [1 + sum(auto.reach(j)) for j in range(len(cuts))]
    assert now == pytest.approx(prior, rel=0.03)


def test_a_cut_grows_deeper_when_the_shallow_depths_accept_more_than_the_prior_said():
    """Depths below the cuts verified so far have no tries of their own: they follow the rate pooled over all
    depths, so a draft that proves better than its profiled alpha gets deeper cuts (before, they kept the prior
    and the cut stayed shallow for good)."""
    from verispec.autotree import AutoCut
    auto = AutoCut([1.1 + 0.15 * k for k in range(1, 6)], [0.3] * 5)
    ks = []
    for _ in range(40):
        k = auto.next_k()
        ks.append(k)
        auto.update(checked=k, accepted=k)              # every drafted token accepted
    assert ks[0] == 1 and ks[-1] == 5


def test_a_cut_tree_follows_what_each_depth_accepts_and_probes_at_depth_one():
    from verispec.autotree import AutoCut
    auto = AutoCut([1 + 0.2 * k for k in range(1, 5)], [0.6] * 4, probe_every=4, max_probe_every=8)
    assert auto.next_k() == 2
    for _ in range(40):                                 # every path is accepted whole: deeper cuts pay
        auto.update(checked=auto.depth, accepted=auto.depth)
    assert auto.next_k() == 4 and auto.reach()[-1] > 0.95
    before = (list(auto.hits), list(auto.tries))
    auto.update(checked=3, accepted=3, drafted=False)   # a lookup chain in the tree's place: not the draft's tree
    auto.update(checked=0, accepted=0)                  # nothing verified
    assert (auto.hits, auto.tries) == before
    for _ in range(40):                                 # now nothing is accepted at depth 1
        auto.update(checked=1, accepted=0)
    ks = [auto.next_k() for _ in range(12)]
    assert ks == [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1]   # plain decoding, probes of the cheapest cut, backing off
    hits, tries = list(auto.hits), list(auto.tries)
    auto.update(checked=2, accepted=1)                  # depth 1 held, depth 2 failed, depths 3-4 untried
    assert auto.hits == pytest.approx([0.9 * hits[0] + 1, 0.9 * hits[1], hits[2], hits[3]])
    assert auto.tries == pytest.approx([0.9 * tries[0] + 1, 0.9 * tries[1] + 1, tries[2], tries[3]])


def test_auto_k_gates_draft_tree_in_the_engine(target_fp32):
    from verispec.api import DEFAULT_DRAFT
    from verispec.autok import MARGIN, CostProfile
    from verispec.autotree import AutoCut
    from verispec.engine import GenerationConfig, Sequence
    from verispec.model import loader
    from verispec.proposers.draft_tree import DraftTreeProposer
    from verispec.sampling import SamplingConfig
    model, tok = target_fp32
    draft, _, _ = loader.load(DEFAULT_DRAFT, "fp32", need_tokenizer=False, target_embedding=model.embed.weight)
    seq = Sequence(model, DraftTreeProposer(draft), tok.prompt_ids("Hi"), GenerationConfig(max_new_tokens=4, k="auto"),
                   CostProfile())
    assert isinstance(seq.auto, AutoCut) and seq.auto.depth == 5 and seq.auto.margin == 0.0
    sampled = Sequence(model, DraftTreeProposer(draft), tok.prompt_ids("Hi"),
                       GenerationConfig(max_new_tokens=4, k="auto", sampling=SamplingConfig(1.0)), CostProfile())
    assert sampled.auto.margin == MARGIN              # T > 0: sampling at every node costs what greedy timing missed


def test_auto_tree_charges_the_nodes_each_cycle_verifies():
    from verispec.autok import CostProfile
    prof = CostProfile(tree_curve={4: 1.4, 8: 2.0, 16: 4.0}, draft_cost={"eagle": 0.2})
    auto = prof.dynamic_tree_chooser("eagle", 4, 12, expected_accepted=1.0)
    assert auto.cost == pytest.approx(1.6) and auto.mean_accepted == 1.0 and auto.next_k() == 12
    for _ in range(60):                                   # every cycle brings a long grafted path: 16 nodes
        auto.update(checked=3, accepted=2, nodes=16)
    assert auto.cost == pytest.approx(4.2, rel=0.05)      # (1 + 2) / 4.2 < 1
    assert auto.next_k() == 0
    for _ in range(150):                                  # the same yield from trees of 4 nodes pays
        auto.update(checked=3, accepted=2, nodes=4)
    assert auto.cost == pytest.approx(1.6, rel=0.05) and auto.next_k() == 12
    chain = prof.dynamic_tree_chooser("eagle", 4, 3)      # no expected yield: a 3-deep chain at the default alpha
    assert chain.mean_accepted == pytest.approx(0.5 + 0.25 + 0.125)


def test_a_static_trees_gate_charges_grafted_nodes_too():
    """A static tree with an n-gram path grafted on verifies more nodes where the context repeats: the gate's
    running cost follows the nodes each cycle verified, as a dynamic tree's does."""
    from verispec.autok import CostProfile
    from verispec.tree import topk_per_depth
    prof = CostProfile(tree_curve={4: 1.4, 8: 2.0, 16: 4.0}, draft_cost={"eagle": 0.2})
    auto = prof.tree_chooser("eagle", topk_per_depth([2, 1, 1]), expected_accepted=1.0)     # 6 nodes
    assert auto.cost == pytest.approx(1.7 + 0.2) and auto.next_k() == 3
    for _ in range(60):                                   # every cycle: the tree and a 12-node grafted path
        auto.update(checked=3, accepted=2, nodes=16)
    assert auto.cost == pytest.approx(4.2, rel=0.05) and auto.next_k() == 0
    for _ in range(150):                                  # lookup chains of 4 in the tree's place: no drafting
        auto.update(checked=5, accepted=4, nodes=4, drafted=False)
    assert auto.cost == pytest.approx(1.4, rel=0.05) and auto.next_k() == 3


def test_auto_tree_verifies_while_the_tree_pays_and_decodes_plainly_when_it_does_not():
    from verispec.autok import MARGIN
    from verispec.autotree import AutoTree
    auto = AutoTree(cost=1.5, depth=3, prior_accepted=1.0, probe_every=4, max_probe_every=8)
    assert auto.next_k() == 3                      # (1 + 1.0) / 1.5 = 1.33 > 1 + margin
    for _ in range(20):                            # nothing accepted (high temperature): 1 / 1.5 < 1
        auto.update(checked=1, accepted=0)
    ks = [auto.next_k() for _ in range(20)]
    assert ks[:4] == [0, 0, 0, 3] and ks.count(3) == 3       # probes at 4, then 8 apart
    for _ in range(20):
        auto.update(checked=3, accepted=2)
    assert (1 + auto.mean_accepted) / 1.5 > 1 + MARGIN and auto.next_k() == 3
    assert AutoTree(cost=1.5, depth=3, prior_accepted=0.55).next_k() == 3      # a predicted 3% gain is enough


def test_a_tree_smaller_than_the_smallest_measured_one_costs_what_its_rows_cost_as_a_chain():
    """Trees of 1-3 nodes cost what chains of 2-4 tokens cost (measured within 5%, session 51), not the line from a
    plain step to the 4-node tree: where rows are dear (AVX2) that line made one node look 15% dearer than it is."""
    from verispec.autok import CostProfile
    prof = CostProfile(curve={1: 1.0, 2: 1.2, 3: 1.5, 4: 1.8, 5: 2.4}, tree_curve={4: 2.3, 8: 4.0})
    assert [prof.tree_cost(n) for n in (1, 2, 3)] == [1.2, 1.5, 1.8]
    assert prof.tree_cost(4) == 2.3 and prof.tree_cost(6) == pytest.approx(3.15)
