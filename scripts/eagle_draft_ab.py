"""Session 35's two changes, checked on the default model on this CPU, each side by side in one process:

1. EAGLE's trees drafted on the device (`proposers/eagle_graph.py`) against the older host-ranked drafting
   (`eagle._HOST_RANKED`), alternating: the same tree (asserted) and the median ms of a proposal;
2. a tree verified at T = 1 child by child (`verify_tree`) and with one draw per node (`verify_tree_drawn`), on a
   real EAGLE tree and the target's real p: the accepted-length counts and means over many uniforms.

    python scripts/eagle_draft_ab.py [REPEATS [DRAWS]]        (40 proposals per mode; 6000 draws per rule)
"""
import statistics
import sys
import time

import torch

from verispec.api import Target, eagle_proposer
from verispec.proposers import eagle
from verispec.sampling import SamplingConfig, probs
from verispec.verify import verify_tree, verify_tree_drawn

PROMPTS = ("Write a Python function that returns the n-th Fibonacci number, with a docstring and tests.",
           "What is the capital of France? Answer in one sentence.")


def prepared(target, tree: str, ids: list[int]):
    prop = eagle_proposer(target, None, tree)
    prop.prepare(len(ids) + 64)
    with torch.inference_mode():
        prop.observe(target.model(torch.tensor([ids[:-1]]), torch.arange(len(ids) - 1)[None], None)[0])
    return prop


def draft_times(target, ids: list[int], repeats: int) -> None:
    for tree in ("dynamic", "dynamic:16", "auto", "31"):
        prop = prepared(target, tree, ids)
        times, outs = {False: [], True: []}, {}
        for _ in range(repeats):
            for host in (False, True):
                eagle._HOST_RANKED[0] = host
                t0 = time.perf_counter()
                p = prop.propose(ids, 8, SamplingConfig(0.0), torch.Generator())
                outs[host] = (p.tokens, p.tree.choices)               # read back: part of the cost
                times[host].append(time.perf_counter() - t0)
        eagle._HOST_RANKED[0] = False
        assert outs[False] == outs[True], f"{tree}: the device drafted another tree"
        print(f"drafting, --tree {tree} ({len(outs[False][0])} nodes, same tree): on the device "
              f"{1e3 * statistics.median(times[False]):.2f} ms, host-ranked {1e3 * statistics.median(times[True]):.2f} ms")


def rule_ab(target, ids: list[int], draws: int, g: torch.Generator) -> None:
    t1 = SamplingConfig(1.0)
    prop = prepared(target, "dynamic:8", ids)
    with torch.inference_mode():
        cache = target.model.new_cache(len(ids) + 64)
        target.model(torch.tensor([ids[:-1]]), torch.arange(len(ids) - 1)[None], cache)
        proposal = prop.propose(ids, 6, t1, torch.Generator())
        tree, tokens, n = proposal.tree, proposal.tokens, cache.length
        mask = torch.cat([torch.ones(1 + tree.size, n, dtype=torch.bool), tree.ancestry], 1)[None]
        hidden = target.model(torch.tensor([[ids[-1]] + tokens]), (n + torch.tensor(tree.depths))[None], cache, mask)
        p = probs(target.model.logits(hidden), t1)[0]                                  # [1+n, V]
    counts = {"child by child": [0] * (tree.depth + 1), "one draw per node": [0] * (tree.depth + 1)}
    for _ in range(draws):
        u = torch.rand(1 + tree.size, generator=g)
        counts["child by child"][len(verify_tree(p, None, tokens, tree, u, torch.rand((), generator=g))[0])] += 1
        counts["one draw per node"][len(verify_tree_drawn(p, tokens, tree, torch.rand(1 + tree.size, generator=g))[0])] += 1
    for rule, c in counts.items():
        print(f"T = 1, a {tree.size}-node tree: {rule}: accepted lengths {c}, mean "
              f"{sum(i * k for i, k in enumerate(c)) / draws:.3f}")


def main():
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    draws = int(sys.argv[2]) if len(sys.argv) > 2 else 6000
    torch.set_num_threads(2)
    target = Target.load(None, "bf16", "cpu")
    g = torch.Generator().manual_seed(0)
    for text in PROMPTS:
        ids = target.tokenizer.prompt_ids(text)
        print(f"prompt: {text!r}")
        draft_times(target, ids, repeats)
        rule_ab(target, ids, draws, g)


if __name__ == "__main__":
    main()
