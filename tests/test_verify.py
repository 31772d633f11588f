"""The accept rule: hand-worked cases, and the fast batched rule against its slow reference."""
import pytest
import torch

from verispec.sampling import SamplingConfig, probs, sample
from verispec.verify import verify_chain, verify_chain_reference


def onehot(i, v=4):
    return torch.nn.functional.one_hot(torch.tensor(i), v).float()


def test_greedy_accepts_while_draft_equals_argmax():
    p = torch.stack([onehot(2), onehot(1), onehot(3), onehot(0)])[None]      # argmaxes 2, 1, 3, then bonus 0
    draft = torch.tensor([[2, 1, 0]])                                          # third guess is wrong
    n, nxt = verify_chain(p, None, draft, torch.full((1, 3), 0.999), torch.tensor([0.5]))
    assert n.tolist() == [2] and nxt.tolist() == [3]                           # recovered = target's argmax


def test_all_accepted_gives_bonus_from_last_position():
    p = torch.stack([onehot(2), onehot(1), onehot(3)])[None]
    n, nxt = verify_chain(p, None, torch.tensor([[2, 1]]), torch.zeros(1, 2), torch.tensor([0.3]))
    assert n.tolist() == [2] and nxt.tolist() == [3]


def test_accept_probability_is_p_over_q():
    p = torch.tensor([[[0.2, 0.3, 0.5, 0.0], [0.25] * 4]])
    q = torch.tensor([[[0.1, 0.6, 0.3, 0.0]]])                                 # p/q at token 1 = 0.5
    draft = torch.tensor([[1]])
    n_lo, _ = verify_chain(p, q, draft, torch.tensor([[0.49]]), torch.tensor([0.0]))
    n_hi, rec = verify_chain(p, q, draft, torch.tensor([[0.51]]), torch.tensor([0.0]))
    assert n_lo.tolist() == [1] and n_hi.tolist() == [0]
    # residual max(0, p - q) = [0.1, 0, 0.2, 0]: u = 0 -> token 0, and token 1 (p < q) is never recovered
    assert rec.tolist() == [0]
    _, rec = verify_chain(p, q, draft, torch.tensor([[0.51]]), torch.tensor([0.5]))
    assert rec.tolist() == [2]


def test_draft_token_more_likely_under_target_is_always_accepted():
    p = torch.tensor([[[0.1, 0.9], [0.5, 0.5]]])
    q = torch.tensor([[[0.5, 0.5]]])
    n, _ = verify_chain(p, q, torch.tensor([[1]]), torch.tensor([[0.9999]]), torch.tensor([0.1]))
    assert n.tolist() == [1]


def test_deterministic_proposer_residual_excludes_the_rejected_token():
    p = torch.tensor([[[0.5, 0.5, 0.0], [1 / 3] * 3]])
    for u in torch.linspace(0, 0.999, 20):
        n, rec = verify_chain(p, None, torch.tensor([[0]]), torch.tensor([[0.7]]), u[None])
        assert n.tolist() == [0] and rec.tolist() == [1]                       # only token 1 is left


def test_ragged_rows_stop_at_their_own_draft_length():
    p = torch.stack([onehot(1), onehot(1), onehot(2)])[None].repeat(2, 1, 1)
    draft = torch.tensor([[1, 1], [1, 1]])
    n, nxt = verify_chain(p, None, draft, torch.zeros(2, 2), torch.zeros(2), num_draft=torch.tensor([2, 1]))
    assert n.tolist() == [2, 1] and nxt.tolist() == [2, 1]                     # row 1: bonus at position 2


def test_sample_is_inverse_cdf_and_skips_zero_weights():
    w = torch.tensor([0.0, 2.0, 0.0, 2.0, 0.0])
    assert sample(w, torch.tensor(0.0)).item() == 1
    assert sample(w, torch.tensor(0.49)).item() == 1
    assert sample(w, torch.tensor(0.5)).item() == 3
    assert sample(w, torch.tensor(0.999999)).item() == 3                       # never a trailing zero


@pytest.mark.parametrize("with_q", [True, False])
@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_fast_rule_equals_slow_reference(with_q, temperature):
    g = torch.Generator().manual_seed(1)
    cfg = SamplingConfig(temperature=temperature, top_p=0.9 if temperature == 0.7 else 1.0)
    for trial in range(40):
        batch, k, vocab = 5, int(torch.randint(1, 6, (), generator=g)), 7
        p = probs(torch.randn(batch, k + 1, vocab, generator=g) * 2, cfg)
        q = probs(torch.randn(batch, k, vocab, generator=g) * 2, cfg) if with_q else None
        # draft tokens drawn from q (or anywhere, for a deterministic proposer), with some forced agreements
        draft = (sample(q, torch.rand(batch, k, generator=g)) if with_q
                 else torch.randint(0, vocab, (batch, k), generator=g))
        agree = torch.rand(batch, k, generator=g) < 0.5
        if not with_q:
            draft = torch.where(agree, p[:, :k].argmax(-1), draft)
        u_accept, u_final = torch.rand(batch, k, generator=g), torch.rand(batch, generator=g)
        num_draft = torch.randint(0, k + 1, (batch,), generator=g)
        fast = verify_chain(p, q, draft, u_accept, u_final, num_draft)
        slow = verify_chain_reference(p, q, draft, u_accept, u_final, num_draft)
        assert torch.equal(fast[0], slow[0]) and torch.equal(fast[1], slow[1])


def test_probs_top_k_top_p_and_greedy():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0])
    assert probs(logits, SamplingConfig(0.0)).tolist() == [1, 0, 0, 0]
    assert (probs(logits, SamplingConfig(1.0, top_k=2)) > 0).tolist() == [True, True, False, False]
    p = probs(logits, SamplingConfig(1.0))
    kept = probs(logits, SamplingConfig(1.0, top_p=float(p[0]) + 1e-4)) > 0  # needs the first two tokens
    assert kept.tolist() == [True, True, False, False]
    assert torch.allclose(probs(logits, SamplingConfig(2.0)), torch.softmax(logits / 2, -1))


def test_probs_give_a_row_alone_its_bits_among_other_rows():
    """Plain decoding draws from one row's p, verification from k + 1 rows': `probs` must give a row the same bits
    either way, top-k and top-p included (whose renormalisation, summed by `sum`, splits a lone row across
    threads)."""
    torch.set_num_threads(2)
    logits = torch.randn(9, 49152, generator=torch.Generator().manual_seed(0)) * 3
    for cfg in (SamplingConfig(temperature=0.7), SamplingConfig(temperature=1.0, top_p=0.9),
                SamplingConfig(temperature=1.3, top_k=50, top_p=0.95)):
        together = probs(logits, cfg)
        for i in range(9):
            assert torch.equal(probs(logits[i:i + 1], cfg)[0], together[i])


def test_greedy_rules_equal_the_general_rules_on_one_hot_p():
    """At temperature 0 the engine follows the target's argmax (`greedy_chain`, `greedy_tree`) instead of running
    the general rule over one-hot p: on random chains and trees, with drafts that often match and logits with
    tied maxima, with and without a draft q, both give the same accepted tokens and the same next token."""
    from verispec.sampling import top_tokens
    from verispec.tree import build_tree
    from verispec.verify import greedy_chain, greedy_tree, verify_tree
    g = torch.Generator().manual_seed(4)
    greedy = SamplingConfig(0.0)
    for trial in range(60):
        vocab = 6
        logits = torch.randint(0, 3, (12, vocab), generator=g).float()           # small integers: many ties
        top = top_tokens(logits)
        assert torch.equal(top, logits.argmax(-1))                                # the first of tied maxima
        p = probs(logits, greedy)
        k = int(torch.randint(0, 6, (), generator=g))
        draft = torch.where(torch.rand(k, generator=g) < 0.6, top[:k], torch.randint(0, vocab, (k,), generator=g))
        q = probs(torch.randn(k, vocab, generator=g), SamplingConfig(1.0)) if trial % 2 else None
        n, nxt = verify_chain(p[None, :k + 1], None if q is None else q[None], draft[None], torch.rand(1, k, generator=g),
                              torch.rand(1, generator=g))
        assert greedy_chain(top[:k + 1].tolist(), draft.tolist()) == (int(n), int(nxt))
        paths = {()}                                                              # a random tree of up to 11 nodes
        while len(paths) < 12:
            parent = sorted(paths)[int(torch.randint(0, len(paths), (), generator=g))]
            if len(parent) < 4:
                paths.add(parent + (sum(1 for c in paths if c[:-1] == parent and len(c) == len(parent) + 1),))
        tree = build_tree(sorted(paths - {()}))
        tokens = [int(top[tree.parents[i]]) if torch.rand((), generator=g) < 0.6
                  else int(torch.randint(0, vocab, (), generator=g)) for i in range(1, tree.size + 1)]
        rows = p[:1 + tree.size]
        qt = probs(torch.randn(1 + tree.size, vocab, generator=g), SamplingConfig(1.0)) if trial % 2 else None
        u = torch.rand(1 + tree.size, generator=g)
        assert greedy_tree(top.tolist(), tokens, tree) == verify_tree(rows, qt, tokens, tree, u, torch.rand(()))
