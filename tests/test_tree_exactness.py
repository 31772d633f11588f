"""Statistical exactness of recursive rejection sampling over token trees (small vocabularies).

Same set-up as test_exactness: Markov target and draft over V tokens, exact joint law of the first M tokens.
Trees are drafted two ways: deterministic top-k children (q one-hot per child) and i.i.d. samples from q.
"""
import pytest
import torch
from test_exactness import START, exact_joint, gof_pvalue, tables

from verispec.sampling import SamplingConfig, probs, sample
from verispec.tree import topk_per_depth
from verispec.verify import verify_tree, verify_tree_drawn

RUNS = 12_000


def draft_tree(tree, q_table, last, iid, g):
    """Fill the tree: node tokens, and the q each node's children came from."""
    tokens = []
    node_token = {0: last}
    for node in range(1, tree.size + 1):
        parent = tree.parents[node]
        dist = q_table[node_token[parent]]
        if iid:
            tok = int(sample(dist, torch.rand((), generator=g)))
        else:
            tok = int(dist.argsort(descending=True)[tree.rank(node)])
        node_token[node] = tok
        tokens.append(tok)
    return tokens, node_token


def simulate_tree(p_table, q_table, tree, M, rule, iid, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(RUNS):
        seq, last = [], START
        while len(seq) < M:
            tokens, node_token = draft_tree(tree, q_table, last, iid, g)
            p = torch.stack([p_table[node_token[i]] for i in range(tree.size + 1)])      # [1 + n, V]
            q = torch.stack([q_table[node_token[i]] for i in range(tree.size + 1)]) if iid else None
            path, nxt = rule(p, q, tokens, tree, torch.rand(tree.size + 1, generator=g), torch.rand((), generator=g))
            seq += [tokens[i - 1] for i in path] + [nxt]
            last = seq[-1]
        out.append(seq[:M])
    return torch.tensor(out)


def drawn_rule(p, q, tokens, tree, u_accept, u_final):
    """`verify_tree_drawn` in `simulate_tree`'s signature: u_accept[i] is node i's uniform."""
    assert q is None
    return verify_tree_drawn(p, tokens, tree, u_accept)


@pytest.mark.parametrize("rule,iid,temperature,top_p", [(verify_tree, False, 1.0, 1.0), (verify_tree, True, 1.0, 1.0),
                                                        (verify_tree, False, 0.7, 0.9), (verify_tree, True, 1.3, 1.0),
                                                        (drawn_rule, False, 1.0, 1.0), (drawn_rule, False, 0.7, 0.9)])
def test_tree_sampling_matches_target_distribution(rule, iid, temperature, top_p):
    cfg = SamplingConfig(temperature=temperature, top_p=top_p)
    target_logits, draft_logits = tables(seed=17)
    p, q = probs(target_logits, cfg), probs(draft_logits, cfg)
    tree = topk_per_depth([2, 2])
    samples = simulate_tree(p, q, tree, 3, rule, iid, seed=3)
    assert gof_pvalue(samples, exact_joint(p, 3)) > 1e-3


def test_drawn_rule_accepts_as_often_as_the_general_rule():
    """One draw a node accepts each child with the probability the child-by-child rule gives it, p(x) at the
    root's children: over many uniforms the two rules' accepted first nodes agree in frequency."""
    cfg = SamplingConfig(temperature=1.0)
    target_logits, _ = tables(seed=17)
    p = probs(target_logits, cfg)
    tree = topk_per_depth([3])
    rows = torch.stack([p[START]] * (1 + tree.size))
    tokens = [int(t) for t in p[START].argsort(descending=True)[:3]]
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(2, 4)
    for _ in range(4000):
        for r, path in enumerate((verify_tree(rows, None, tokens, tree, torch.rand(4, generator=g),
                                              torch.rand((), generator=g))[0],
                                  verify_tree_drawn(rows, tokens, tree, torch.rand(4, generator=g))[0])):
            counts[r, path[0] if path else 0] += 1
    want = torch.tensor([1 - float(p[START, tokens].sum())] + [float(p[START, t]) for t in tokens])
    assert (counts / 4000 - want).abs().max() < 0.03, (counts / 4000, want)


def stale_residual_rule(p, q, tokens, tree, u_accept, u_final):
    """Planted bias: siblings are all tested against p itself, the residual never updated."""
    node, path = 0, []
    while True:
        children = tree.children(node)
        if not children:
            return path, int(sample(p[node], u_final))
        for child in children:
            x = tokens[child - 1]
            if float(u_accept[child]) < float(p[node][x]):
                path.append(child)
                node = child
                break
        else:
            return path, int(sample(p[node], u_final))


def test_planted_stale_residual_fails():
    cfg = SamplingConfig(temperature=1.0)
    target_logits, draft_logits = tables(seed=17)
    p, q = probs(target_logits, cfg), probs(draft_logits, cfg)
    samples = simulate_tree(p, q, topk_per_depth([2, 2]), 3, stale_residual_rule, False, seed=3)
    assert gof_pvalue(samples, exact_joint(p, 3)) < 1e-6


def test_greedy_tree_follows_the_argmax():
    cfg = SamplingConfig(0.0)
    target_logits, draft_logits = tables(seed=17)
    p, q = probs(target_logits, cfg), probs(draft_logits, cfg)
    samples = simulate_tree(p, q, topk_per_depth([3, 2]), 4, verify_tree, False, seed=1)[:50]
    expected, prev = [], START
    for _ in range(4):
        prev = int(target_logits[prev].argmax())
        expected.append(prev)
    assert (samples == torch.tensor(expected)).all()
