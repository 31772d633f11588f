"""Greedy verification's cost per cycle: the general rule over one-hot p (`probs` then `verify_tree` or
`verify_chain`) against following the argmax (`top_tokens` then `greedy_tree` or `greedy_chain`), on random
logits the size of the default model's vocabulary, for a chain of k = 8 and a breadth-first tree of N nodes
(default 14); medians of 200 calls. Both give the same tokens (tests/test_verify.py). Also the argmax of the
tree's rows two ways (`sampling.top_tokens` uses the second).

    python scripts/greedy_verify_cost.py [NODES [VOCAB]]
"""
import statistics
import sys
import time

import torch

from verispec.sampling import SamplingConfig, probs, top_tokens
from verispec.tree import build_tree, topk_per_depth
from verispec.verify import greedy_chain, greedy_tree, verify_chain, verify_tree


def median_ms(fn, repeats=200):
    times = []
    for _ in range(repeats + 10):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[10:]) * 1e3


def main(nodes: int, vocab: int):
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    greedy = SamplingConfig(0.0)
    tree = build_tree(list(topk_per_depth([2] * 8, max_nodes=1024).choices[:nodes]))       # as scripts/tree_cost.py
    logits = torch.randn(1 + tree.size, vocab, generator=g)
    top = top_tokens(logits)
    tokens = [int(top[tree.parents[i]]) if i % 3 else 0 for i in range(1, tree.size + 1)]
    u, uf = torch.rand(1 + tree.size, generator=g), torch.rand(())
    general = median_ms(lambda: verify_tree(probs(logits, greedy), None, tokens, tree, u, uf))
    fast = median_ms(lambda: greedy_tree(top_tokens(logits).tolist(), tokens, tree))
    print(f"tree of {tree.size} nodes, vocabulary {vocab}: general rule {general:.3f} ms, argmax {fast:.3f} ms")
    print(f"  the argmax of its {1 + tree.size} rows: argmax(-1) {median_ms(lambda: logits.argmax(-1)):.3f} ms, "
          f"max(-1).indices {median_ms(lambda: logits.max(-1).indices):.3f} ms")
    chain = torch.randn(1, 9, vocab, generator=g)
    draft = top_tokens(chain[0, :8])
    draft[5] = (draft[5] + 1) % vocab                                # a mismatch at position 5
    ua, uc = torch.rand(1, 8, generator=g), torch.rand(1, generator=g)
    general = median_ms(lambda: verify_chain(probs(chain, greedy), None, draft[None], ua, uc))
    fast = median_ms(lambda: greedy_chain(top_tokens(chain[0]).tolist(), draft.tolist()))
    print(f"chain of k = 8, vocabulary {vocab}: general rule {general:.3f} ms, argmax {fast:.3f} ms")


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) > 2 or not all(a.isdigit() and int(a) > 0 for a in args):
        sys.exit("greedy_verify_cost.py: arguments are NODES and VOCAB, positive integers")
    main(int(args[0]) if args else 14, int(args[1]) if len(args) > 1 else 49152)
