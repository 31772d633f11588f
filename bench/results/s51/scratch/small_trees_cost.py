"""Chains of 1 + n rows against trees of n nodes (top-2 breadth-first) for small n, timed in the same rounds
(`costs.verify_times`, relative to the one-token pass): is a small tree's cost the chain curve's or the line from a
plain step to the 4-node tree?   python bench/results/s51/scratch/small_trees_cost.py MODEL DTYPE [ROUNDS]"""
import sys

from verispec.api import Target
from verispec.costs import verify_times

model = Target.load(sys.argv[1], sys.argv[2]).model
chains, trees = verify_times(model, [1, 2, 3, 4, 5], [1, 2, 3, 4], 256, int(sys.argv[3]) if len(sys.argv) > 3 else 15,
                             relative=True)
line = {n: 1 + (trees[4] - 1) * n / 4 for n in (1, 2, 3)}
print(f"{sys.argv[1]} {sys.argv[2]}")
for n in (1, 2, 3, 4):
    print(f"n {n}: tree {trees[n]:.2f}  chain of 1+n rows {chains[n + 1]:.2f}  line to the 4-node tree "
          f"{line.get(n, trees[4]):.2f}")
