"""Statistical exactness of recursive rejection sampling over token trees (small vocabularies).

Same set-up as test_exactness: Markov target and draft over V tokens, exact joint law of the first M tokens.
Trees are drafted two ways: deterministic top-k children (q one-hot per child) and i.i.d. samples from q.
"""
import pytest
import torch
from test_exactness import START, V, exact_joint, gof_pvalue, tables

from verispec.sampling import SamplingConfig, probs, sample
from verispec.tree import topk_per_depth
from verispec.verify import verify_tree

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


@pytest.mark.parametrize("iid,temperature,top_p", [(False, 1.0, 1.0), (True, 1.0, 1.0), (False, 0.7, 0.9),
                                                   (True, 1.3, 1.0)])
def test_tree_sampling_matches_target_distribution(iid, temperature, top_p):
    cfg = SamplingConfig(temperature=temperature, top_p=top_p)
    target_logits, draft_logits = tables(seed=17)
    p, q = probs(target_logits, cfg), probs(draft_logits, cfg)
    tree = topk_per_depth([2, 2])
    samples = simulate_tree(p, q, tree, 3, verify_tree, iid, seed=3)
    assert gof_pvalue(samples, exact_joint(p, 3)) > 1e-3


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
