"""Proposers on their own: n-gram lookup and the draft model's cache resynchronisation."""
import pytest
import torch

from verispec.model import loader
from verispec.proposers.base import Proposal, Proposer
from verispec.proposers.draft_model import DraftModelProposer
from verispec.proposers import ngram
from verispec.proposers.ngram import LookupRates, NgramProposer, graft, longest_match, lookup, lookup_first
from verispec.tree import build_tree
from verispec.sampling import SamplingConfig


def test_lookup_prefers_longest_suffix_then_latest_match():
    ctx = [1, 2, 3, 9, 9, 2, 3, 7, 7, 1, 2, 3]
    assert lookup(ctx, 2, max_ngram=3) == [9, 9]          # trigram 1 2 3 matched at the start
    assert lookup([5, 2, 3, 8, 4, 2, 3], 3, max_ngram=2) == [8, 4, 2]
    assert lookup([5, 6, 7, 5, 1, 5], 2, max_ngram=1) == [1, 5]  # latest earlier "5"
    assert lookup([3, 1, 2, 1, 2], 5) == [1, 2, 1, 2, 1]    # a loop, copied k tokens ahead
    assert lookup([1, 2, 3, 4], 3) == []                   # nothing repeats
    assert lookup([4], 3) == []


def test_lookup_never_proposes_more_than_k():
    ctx = list(range(10)) * 3
    assert len(lookup(ctx, 4)) == 4


def test_graft_merges_a_chain_into_a_tree_as_one_more_path():
    tree = build_tree([(0,), (1,), (0, 0)])
    base = Proposal([10, 11, 12], None, tree)                  # 10 -> 12, and 11
    merged = graft(base, [10, 13, 14])                          # shares node 10, then branches off
    paths = {tuple(merged.tokens[i - 1] for i in path) for path in merged.tree.paths}
    assert paths == {(10, 12), (11,), (10, 13, 14)}
    assert merged.q is None and merged.tree.size == 5
    assert graft(base, [10, 12]).tree.choices == tree.choices   # a chain already in the tree adds nothing
    new_root = graft(base, [7])                                 # a third first choice
    assert sorted(new_root.tokens[i - 1] for i in new_root.tree.children(0)) == [7, 10, 11]
    with pytest.raises(ValueError):
        graft(Proposal([1, 2]), [3])                            # not a tree


def test_longest_match_finds_the_longest_repeated_suffix_and_its_latest_continuation():
    import random

    def by_hand(ctx, k, cap):
        best = (0, [], False)
        for n in range(1, min(cap, len(ctx) - 1) + 1):
            ends = [s + n for s in range(len(ctx) - n) if ctx[s:s + n] == ctx[-n:]]
            if not ends:
                break
            follow = ctx[ends[-1]:]
            while len(follow) < k:                                 # a loop: extended with its period
                follow = follow + follow[:k - len(follow)]
            best = (n, follow[:k], len({ctx[e] for e in ends}) == 1)
        return best
    assert longest_match([1, 2, 3, 9, 4, 2, 3, 8, 1, 2, 3], 2) == (3, [9, 4], True)
    assert longest_match([7, 7, 7, 7], 3) == (3, [7, 7, 7], True)        # a loop, copied k tokens ahead
    assert longest_match([5, 1, 2, 1, 2, 1], 5) == (3, [2, 1, 2, 1, 2], True)
    assert longest_match([2, 3, 9, 2, 3, 8, 2, 3], 2) == (2, [8, 2], False)   # followed by 9, then by 8
    assert longest_match([1, 2, 3], 3) == (0, [], False) and longest_match([5], 3) == (0, [], False)
    rng = random.Random(0)
    for _ in range(500):
        ctx = [rng.randrange(rng.choice([2, 3, 8])) for _ in range(rng.randint(1, 40))]
        cap = rng.choice([2, 5, 32])
        assert longest_match(ctx, 4, cap) == by_hand(ctx, 4, cap), (ctx, cap)


def test_lookup_first_verifies_a_long_repeat_alone_else_grafts_it_onto_the_tree():
    tree = Proposal([50, 51], None, build_tree([(0,), (1,)]))
    calls = []

    def draft():
        calls.append(1)
        return tree
    line = list(range(10, 10 + ngram.SURE))
    alone = lookup_first([1] + line + [2, 3] + line, 4, draft, LookupRates(6))      # the last SURE tokens repeat
    assert alone == Proposal([2, 3, *line[:2]]) and not calls                # the tree is not even drafted
    short = line[-2:]
    merged = lookup_first([1] + short + [2, 3, 4] + short, 4, draft, LookupRates(6))    # 2 tokens repeat: grafted
    paths = {tuple(merged.tokens[i - 1] for i in path) for path in merged.tree.paths}
    assert calls and paths == {(50,), (51,), (2, 3, 4, short[0])} and merged.q is None
    assert lookup_first([1] + line + [2] + line, 4, draft, LookupRates(0)) is tree  # no "+ngram": the tree alone
    calls.clear()
    twice = lookup_first(line + [2] + line + [3] + line, 4, draft, LookupRates(6))  # followed by 2, then by 3: grafted
    assert calls and twice.tree is not None


def test_lookup_paths_shrink_where_they_fail_and_grow_back_where_they_hold():
    rates = LookupRates(6)
    assert rates.length() == 5                                           # an optimistic start: 0.8 ** 5 >= CUTOFF
    tree = Proposal([50], None, build_tree([(0,)]))
    text = [7, 8, 1, 2, 3, 4, 5, 6, 9, 7, 8]                          # "7 8" seen before: the path is 1 2 3 ...

    def path_of(proposal):                                             # the grafted path's tokens
        return max((tuple(proposal.tokens[i - 1] for i in p) for p in proposal.tree.paths), key=len)
    assert path_of(lookup_first(text, 8, lambda: tree, rates)) == (1, 2, 3, 4, 5)
    for _ in range(8):                                                 # each time something else came next
        text += [40 + len(text), 7, 8]
        lookup_first(text, 8, lambda: tree, rates)
    assert rates.length() == 0 and lookup_first(text, 8, lambda: tree, rates) is tree    # no path at all
    assert rates.last is None
    short = LookupRates(6)
    for _ in range(4):                                                 # the first token holds, the second fails
        short.last = (0, [1, 2, 3])
        short.learn([1, 9])
    assert 1 <= short.length() < 6 and short.hits[2] == pytest.approx(short.PRIOR * short.WEIGHT)   # 3rd unscored
    for _ in range(30):                                                # then whole paths hold
        short.last = (0, [1, 2, 3, 4, 5, 6])
        short.learn([1, 2, 3, 4, 5, 6, 0])
    assert short.length() == 6


def test_a_request_learns_its_own_lookup_rates(tiny_dir):
    """Every tree proposer with a lookup path starts each request (prepare) and each sequence of a batch (fork)
    from the prior."""
    from verispec.api import Target, make_engine
    from verispec.proposers.draft_tree import DraftTreeProposer
    target = Target.load(None, "fp32", "cpu")
    tiny, _, _ = loader.load(tiny_dir, "fp32")
    proposers = [make_engine(m, target, tree="auto+ngram").proposer for m in ("eagle", "medusa")]
    for proposer in proposers + [DraftTreeProposer(tiny, graft=6)]:
        proposer.lookup.hits[0] = 0.0
        prior = LookupRates(6).length()
        assert proposer.fork().lookup.length() == prior and proposer.lookup.length() == 0, proposer.name
        proposer.prepare(64)
        assert proposer.lookup.length() == prior, proposer.name


def test_proposers_implement_the_protocol(target_fp32):
    assert isinstance(NgramProposer(), Proposer)
    assert isinstance(DraftModelProposer(target_fp32[0]), Proposer)


def test_draft_resyncs_its_cache_after_divergence(tiny_dir):
    model, _, _ = loader.load(tiny_dir, "fp32")
    prop = DraftModelProposer(model)
    prop.prepare(64)
    g = torch.Generator().manual_seed(0)
    cfg = SamplingConfig(0.0)
    first = prop.propose([5, 6, 7, 8], 3, cfg, g)
    assert len(first.tokens) == 3 and first.q.shape == (3, model.cfg.vocab_size)
    # the target accepted one draft token, then emitted its own: the draft must forget the rest
    ctx = [5, 6, 7, 8, first.tokens[0], 42]
    resumed = prop.propose(ctx, 3, cfg, g)
    fresh = DraftModelProposer(model)
    fresh.prepare(64)
    assert resumed.tokens == fresh.propose(ctx, 3, cfg, g).tokens
    assert prop.seen == ctx + resumed.tokens[:2]


def test_a_reduced_draft_head_drafts_only_its_tokens_and_speculation_stays_exact(tiny_dir):
    """A draft loaded with head_ids (a tied model's head too) drafts only those tokens, its q is 0 elsewhere, and
    speculation with it gives plain decoding's greedy tokens; bad id lists are one-line errors."""
    from verispec.engine import Engine, GenerationConfig
    from verispec.errors import VerispecError
    target, _, _ = loader.load(tiny_dir, "fp32")
    assert target.cfg.tie_embeddings
    ids = torch.arange(0, target.cfg.vocab_size, 7)
    draft, _, _ = loader.load(tiny_dir, "fp32", head_ids=ids)
    assert draft.cfg.head_tokens == len(ids) and not draft.cfg.tie_embeddings
    assert torch.equal(draft.lm_head.weight, target.embed.weight[ids])
    prop = DraftModelProposer(draft)
    prop.prepare(64)
    for temperature in (0.0, 1.0):
        out = prop.propose([5, 6, 7, 8], 4, SamplingConfig(temperature), torch.Generator().manual_seed(0))
        assert all(t % 7 == 0 for t in out.tokens) and out.q.shape == (4, target.cfg.vocab_size)
        assert float(out.q[:, ids].sum(-1).min()) > 0.999 and float(out.q.sum(-1).max()) < 1.001
    cfg = GenerationConfig(max_new_tokens=12, k=3)
    plain = Engine(target).generate([5, 6, 7, 8], cfg).token_ids
    assert Engine(target, DraftModelProposer(draft)).generate([5, 6, 7, 8], cfg).token_ids == plain
    for bad in (ids.flip(0), torch.tensor([0, 0, 1]), torch.tensor([target.cfg.vocab_size])):
        with pytest.raises(VerispecError, match="sorted, distinct"):
            loader.load(tiny_dir, "fp32", head_ids=bad)


def _ranking_after(model, ids: list[int], width: int) -> list[int]:
    """The draft's top-`width` next tokens after `ids`, from a fresh causal pass."""
    with torch.inference_mode():
        hidden = model(torch.tensor([ids]), torch.arange(len(ids))[None], model.new_cache(len(ids)))
        return model.logits(hidden[0, -1]).topk(width).indices.tolist()


def test_draft_tree_nodes_are_the_drafts_ranked_choices_along_each_path(tiny_dir):
    from verispec.proposers.draft_tree import DraftTreeProposer
    from verispec.tree import topk_per_depth
    model, _, _ = loader.load(tiny_dir, "fp32")
    tree = topk_per_depth([3, 2, 1])
    prop = DraftTreeProposer(model, tree)
    prop.prepare(64)
    g = torch.Generator().manual_seed(0)
    for context in ([5, 17, 42, 99, 7], [5, 17, 42, 99, 7, 8, 300], [5, 17, 1000]):   # diverging contexts
        out = prop.propose(context, 3, SamplingConfig(1.0), g)
        assert out.tree is tree and out.q is None and len(out.tokens) == tree.size == 3 + 6 + 6
        assert prop.seen == context and prop.cache.length == len(context)      # tree slots were scratch
        for i, path in enumerate(tree.choices):
            prefix = context + [out.tokens[tree.choices.index(path[:d]) ] for d in range(1, len(path))]
            assert out.tokens[i] == _ranking_after(model, prefix, 3)[path[-1]], path
    short = prop.propose([5, 17, 42], 2, SamplingConfig(1.0), g)                 # the length budget cuts depth
    assert short.tree.depth == 2 and short.tree.size == 3 + 6
    assert isinstance(prop, Proposer)


def test_top_choices_is_each_rows_own_topk():
    """One read-back for rows of different widths gives each row exactly its own topk (scores and indices)."""
    from verispec.proposers.base import top_choices
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(6, 40, generator=g)
    scores[2, 5] = scores[2, 9] = scores[2].max() + 1                 # an exact tie at the top
    widths = [3, 1, 3, 2, 1, 4]
    got = top_choices(scores, widths)
    for r, w in enumerate(widths):
        top = scores[r:r + 1].topk(w)
        assert got[r] == list(zip(top.values[0].tolist(), top.indices[0].tolist()))


def test_top_indices_are_top_choices_left_on_the_device():
    """Medusa's tree gathered on the device takes the very indices, ties included, that one read of
    `top_choices` gives."""
    from verispec.proposers.base import top_choices, top_indices
    g = torch.Generator().manual_seed(1)
    scores = torch.randn(5, 30, generator=g)
    scores[1, 3] = scores[1, 7] = scores[1, 20] = scores[1].max() + 1          # exact ties at the top
    scores[4, 2] = scores[4, 11] = scores[4].max() + 1
    widths = [2, 3, 1, 3, 2]
    flat, at = top_indices(scores, widths)
    for r, row in enumerate(top_choices(scores, widths)):
        assert flat[at[r]:at[r] + widths[r]].tolist() == [i for _, i in row]


def test_a_proposal_left_on_the_device_is_read_back_with_the_verification():
    """`read_with` brings values of any dtype back exactly, with the proposal's tokens, in one read; `tokens`
    reads them alone otherwise; either way the same tokens."""
    p = torch.rand(3, 7)
    proposal = Proposal(on_device=torch.tensor([5, 1, 4]))
    assert proposal.size == 3 and proposal._tokens is None                    # nothing read yet
    wide, small = torch.tensor([2, 2 ** 24 + 1]), torch.tensor([0.1, 1e-300], dtype=torch.float64)
    top, probs, f64, flags = proposal.read_with(wide, p, small, torch.tensor([True, False, True]))
    assert top.tolist() == [2, 2 ** 24 + 1] and top.dtype == torch.long and torch.equal(probs, p)   # every bit
    assert torch.equal(f64, small) and flags.tolist() == [True, False, True]
    assert proposal.tokens == [5, 1, 4]
    again = Proposal(on_device=torch.tensor([5, 1, 4]))
    assert again.tokens == [5, 1, 4] and again == proposal
    assert Proposal([5, 1, 4]).read_with(torch.tensor([9]))[0].tolist() == [9]    # tokens on the host already
    assert Proposal().size == 0 and Proposal().read_with() == []


def test_draft_proposals_stay_on_the_device_until_read(tiny_dir):
    """The draft model leaves its tokens on the device (read back by the engine, with its verification); its
    record of what its cache holds settles from them once they are read."""
    model, _, _ = loader.load(tiny_dir, "fp32")
    prop = DraftModelProposer(model)
    prop.prepare(64)
    first = prop.propose([5, 6, 7], 3, SamplingConfig(), torch.Generator())
    assert first.on_device is not None and first._tokens is None and first.size == 3
    assert prop.unread is not None                                              # not settled yet
    assert prop.seen == [5, 6, 7] + first.tokens[:2] and prop.cache.length == 5
    assert prop.unread is None
