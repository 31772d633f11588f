"""The verify cost curve T(n)/T(1) (chains) and trees' T(1 + n)/T(1), relative per round, after C cached tokens,
for each C given: how the cost of extra rows grows with the context.

    python bench/results/s45/scratch/curve_ctx.py 256,1024,2400 [DTYPE]
"""
import sys, torch
from verispec.api import Target
from verispec.costs import verify_times
torch.set_num_threads(2)
target = Target.load(None, sys.argv[2] if len(sys.argv) > 2 else "bf16", "cpu")
ns, trees = [1, 2, 4, 6, 8, 10, 12, 16], [4, 8, 12, 16, 24, 32]
for c in map(int, sys.argv[1].split(",")):
    abs1, _ = verify_times(target.model, [1], [], c, 7)
    chain, tree = verify_times(target.model, ns, trees, c, 7, relative=True)
    print(f"context {c}: T(1) {abs1[1]*1e3:.2f} ms | chain " + " ".join(f"{n}:{v:.3f}" for n, v in chain.items())
          + " | tree " + " ".join(f"{n}:{v:.3f}" for n, v in tree.items()), flush=True)
