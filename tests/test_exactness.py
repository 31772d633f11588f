"""Statistical exactness of speculative sampling on small vocabularies.

A synthetic target and draft are Markov chains over V tokens (the next-token law depends on the previous token),
so the exact joint law of the first M generated tokens is known in closed form. Speculative decoding with chains
of k >= 3 drafts is simulated over many independent runs (batched), and a chi-square goodness-of-fit test compares
the empirical joint law with the exact one. M = k + 1 tokens are compared, so the first cycle's accepted drafts,
recovered tokens and bonus token all show up in the tested law. The same test must reject planted, subtly wrong
verifiers.
"""
from itertools import product

import pytest
import torch
from scipy.stats import chisquare

from verispec.sampling import SamplingConfig, probs, sample
from verispec.verify import verify_chain

V, RUNS = 4, 60_000
START = 0


def tables(seed):
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(V, V, generator=g) * 1.5            # logits of next | previous
    draft = target + torch.randn(V, V, generator=g) * 1.2    # a related but different draft
    return target, draft


def exact_joint(target_p, M):
    """P(t1..tM) = prod P(t_i | t_{i-1}) with t_0 = START, as a dict over all V^M sequences."""
    out = {}
    for seq in product(range(V), repeat=M):
        prob, prev = 1.0, START
        for t in seq:
            prob *= float(target_p[prev, t])
            prev = t
        out[seq] = prob
    return out


def simulate(target_p, draft_q, k, M, rule, seed, deterministic_draft=False, device="cpu"):
    """Run RUNS speculative generations in lockstep until each has M tokens; return [RUNS, M] tokens."""
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.rand(*shape, generator=g).to(device)  # noqa: E731
    rows = torch.arange(RUNS, device=device)
    out = torch.full((RUNS, M + k + 1), -1, dtype=torch.long, device=device)
    length = torch.zeros(RUNS, dtype=torch.long, device=device)
    last = torch.full((RUNS,), START, dtype=torch.long, device=device)
    while (length < M).any():
        drafts, qs, prev = [], [], last
        for _ in range(k):
            if deterministic_draft:   # an n-gram-like guess: q is one-hot, the verifier gets q=None
                x = draft_q[prev].argmax(-1)
            else:
                qs.append(draft_q[prev])                                   # [RUNS, V]
                x = sample(qs[-1], rand(RUNS))
            drafts.append(x)
            prev = x
        draft = torch.stack(drafts, 1)                                     # [RUNS, k]
        contexts = torch.cat([last[:, None], draft], 1)                    # previous token of each position
        p = target_p[contexts]                                             # [RUNS, k+1, V]
        q = None if deterministic_draft else torch.stack(qs, 1)            # [RUNS, k, V]
        n, nxt = rule(p, q, draft, rand(RUNS, k), rand(RUNS))
        emitted = torch.cat([draft, torch.zeros(RUNS, 1, dtype=torch.long, device=device)], 1)
        emitted[rows, n] = nxt                                             # accepted drafts, then next token
        for j in range(k + 1):
            take = (j <= n) & (length + j < out.shape[1]) & (length < M)
            out[rows[take], (length + j)[take]] = emitted[take, j]
        active = length < M
        length = torch.where(active, length + n + 1, length)
        last = torch.where(active, nxt, last)
    return out[:, :M]


def gof_pvalue(samples, joint):
    counts = {}
    for seq in map(tuple, samples.tolist()):
        counts[seq] = counts.get(seq, 0) + 1
    observed, expected, pool_o, pool_e = [], [], 0, 0.0
    for seq, prob in joint.items():
        e = prob * len(samples)
        if e >= 5:
            observed.append(counts.get(seq, 0))
            expected.append(e)
        else:
            pool_o += counts.get(seq, 0)
            pool_e += e
    if pool_e > 0:
        observed.append(pool_o)
        expected.append(pool_e)
    assert sum(observed) == len(samples)  # no sample fell outside the support (top-k / top-p zeros included)
    scale = len(samples) / sum(expected)  # float32 probabilities: renormalise to the exact sample count
    return chisquare(observed, [e * scale for e in expected]).pvalue


CASES = [  # (k, temperature, top_p, top_k, deterministic draft)
    (3, 1.0, 1.0, 0, False),
    (4, 0.6, 1.0, 0, False),
    (3, 1.5, 1.0, 0, False),
    (4, 1.0, 0.8, 0, False),
    (3, 0.8, 0.9, 3, False),
    (5, 1.0, 1.0, 0, True),
    (3, 0.7, 0.85, 0, True),
]


@pytest.mark.parametrize("k,temperature,top_p,top_k,deterministic", CASES)
def test_speculative_sampling_matches_target_distribution(k, temperature, top_p, top_k, deterministic):
    cfg = SamplingConfig(temperature=temperature, top_p=top_p, top_k=top_k)
    target_logits, draft_logits = tables(seed=k * 10 + int(temperature * 10))
    p, q = probs(target_logits, cfg), probs(draft_logits, cfg)
    samples = simulate(p, q, k, k + 1, verify_chain, seed=7, deterministic_draft=deterministic)
    assert gof_pvalue(samples, exact_joint(p, k + 1)) > 1e-3


def test_reduced_vocabulary_draft_stays_exact():
    """A draft whose head omits tokens (q = 0 there) never proposes them; the residual must supply them."""
    cfg = SamplingConfig(temperature=1.0)
    target_logits, draft_logits = tables(seed=5)
    p = probs(target_logits, cfg)
    missing = int(p.mean(0).argmax())                       # the target's favourite token overall...
    draft_logits[:, missing] = float("-inf")                # ...is outside the draft's head
    q = probs(draft_logits, cfg)
    assert (q[:, missing] == 0).all() and p[:, missing].mean() > 0.25
    samples = simulate(p, q, 4, 5, verify_chain, seed=11)
    assert gof_pvalue(samples, exact_joint(p, 5)) > 1e-3


def test_greedy_is_the_argmax_path():
    target_logits, draft_logits = tables(seed=3)
    cfg = SamplingConfig(0.0)
    p, q = probs(target_logits, cfg), probs(draft_logits, cfg)
    samples = simulate(p, q, 4, 5, verify_chain, seed=1)
    expected, prev = [], START
    for _ in range(5):
        prev = int(target_logits[prev].argmax())
        expected.append(prev)
    assert (samples == torch.tensor(expected)).all()


def argmax_verifier(p, q, draft, u_accept, u_final):
    """Planted bias: accept a draft token only if it is the target's argmax; else sample from p."""
    match = draft == p[:, :-1].argmax(-1)
    n = match.long().cumprod(-1).sum(-1)
    rows = torch.arange(len(n), device=n.device)
    return n, sample(p[rows, n], u_final)


def residual_free_verifier(p, q, draft, u_accept, u_final):
    """Planted bias: the right accept test, but on rejection sample from p instead of norm(max(0, p - q))."""
    n, _ = verify_chain(p, q, draft, u_accept, u_final)
    return n, sample(p[torch.arange(len(n), device=n.device), n], u_final)


def stale_bonus_verifier(p, q, draft, u_accept, u_final):
    """Planted bias: correct except that the bonus token is drawn from the last draft position's p."""
    n, next_token = verify_chain(p, q, draft, u_accept, u_final)
    k, rows = draft.shape[1], torch.arange(len(n), device=n.device)
    return n, torch.where(n == k, sample(p[rows, k - 1], u_final), next_token)


@pytest.mark.parametrize("biased", [argmax_verifier, residual_free_verifier, stale_bonus_verifier])
def test_planted_biased_verifier_fails_the_same_test(biased):
    cfg = SamplingConfig(temperature=1.0)
    target_logits, draft_logits = tables(seed=31)
    p, q = probs(target_logits, cfg), probs(draft_logits, cfg)
    samples = simulate(p, q, 3, 4, biased, seed=7)
    assert gof_pvalue(samples, exact_joint(p, 4)) < 1e-6
