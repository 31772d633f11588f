"""Verify cost of token trees against chains: T(tree of n nodes + root)/T(1) and T(chain of n + 1)/T(1), after
256 cached tokens, medians of 15 passes, on the default model in bf16. Run it from two checkouts to compare
versions side by side (bench/results/tree_cost_dfs.txt). `--dense` adds the same passes attended densely, in
one masked attention call per layer (`Llama.exact_rows = False`): faster, but no longer bitwise the logits of
sequential decoding, so greedy output could differ from plain decoding's at near-ties
(bench/results/tree_cost_dense.txt):

    python scripts/tree_cost.py                       # this checkout
    PYTHONPATH=/path/to/other/checkout python scripts/tree_cost.py
    python scripts/tree_cost.py --dense
"""
import statistics
import sys
import time

import torch

from verispec.api import Target
from verispec.tree import build_tree, topk_per_depth


def median_time(fn, repeats=15):
    times = []
    for _ in range(repeats + 1):                      # the first call warms up
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


def main(context=256, dense=False):
    model = Target.load(None, "bf16", "cpu").model
    cache = model.new_cache(context + 80)
    model(torch.randint(0, 1000, (1, context)), torch.arange(context)[None], cache)

    def run(tokens, positions, mask=None):
        cache.truncate(context)
        model.logits(model(tokens, positions, cache, mask))

    base = median_time(lambda: run(torch.randint(0, 1000, (1, 1)), torch.tensor([[context]])))
    full = topk_per_depth([2] * 8, max_nodes=1024)
    for n in (4, 8, 16, 32):
        tree = build_tree(list(full.choices[:n]))     # breadth-first top-2 tree, as `verispec profile` times
        tokens = torch.randint(0, 1000, (1, n + 1))
        positions = (context + torch.tensor(tree.depths))[None]
        mask = torch.cat([torch.ones(n + 1, context, dtype=torch.bool), tree.ancestry], 1)[None]
        t_tree = median_time(lambda: run(tokens, positions, mask))
        t_chain = median_time(lambda: run(tokens, torch.arange(context, context + n + 1)[None]))
        line = f"{n} tree {t_tree / base:.2f} chain {t_chain / base:.2f}"
        if dense:
            model.exact_rows = False
            t_tree = median_time(lambda: run(tokens, positions, mask))
            t_chain = median_time(lambda: run(tokens, torch.arange(context, context + n + 1)[None]))
            model.exact_rows = True
            line += f" dense: tree {t_tree / base:.2f} chain {t_chain / base:.2f}"
        print(f"{line} base {base * 1e3:.1f}ms", flush=True)


if __name__ == "__main__":
    main(dense="--dense" in sys.argv[1:])
