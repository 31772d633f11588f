"""A pass of 1 row, a chain of 5 and a 4-node tree (5 rows) after C cached tokens, interleaved for 40 rounds:
median ms of the pass and of its logits, and each over the one-row pass's. 2 threads.

    python bench/results/s50/scratch/tree_pass.py DTYPE C      (e.g. gguf-q8 100)
"""
import sys, time, torch, statistics
from verispec.api import Target
from verispec.costs import primed_cache
from verispec.tree import build_tree, topk_per_depth
torch.set_num_threads(2)
dtype, C = sys.argv[1], int(sys.argv[2])
m = Target.load(None, dtype, "cpu").model
g = torch.Generator().manual_seed(0)
cache = primed_cache(m, C, 40, g)
full = topk_per_depth([2] * 8, max_nodes=1024)
tree = build_tree(list(full.choices[:4]))
mask = torch.cat([torch.ones(5, C, dtype=torch.bool), tree.ancestry], 1)[None]
shapes = {"1": (torch.randint(0, 1000, (1, 1)), torch.arange(C, C + 1)[None], None),
          "chain5": (torch.randint(0, 1000, (1, 5)), torch.arange(C, C + 5)[None], None),
          "tree4": (torch.randint(0, 1000, (1, 5)), (C + torch.tensor(tree.depths))[None], mask)}
T = {k: [] for k in shapes}; L = {k: [] for k in shapes}
with torch.inference_mode():
    for r in range(40):
        for k, (tok, pos, mk) in shapes.items():
            cache.truncate(C)
            t0 = time.perf_counter(); h = m(tok, pos, cache, mk); t1 = time.perf_counter(); m.logits(h); t2 = time.perf_counter()
            T[k].append(t1 - t0); L[k].append(t2 - t1)
b, bl = statistics.median(T["1"]), statistics.median(L["1"])
for k in shapes:
    print(f"C={C} {k:7s} pass {statistics.median(T[k])*1e3:6.2f} ms ({statistics.median(T[k])/b:.2f})  logits {statistics.median(L[k])*1e3:5.2f} ms ({statistics.median(L[k])/bl:.2f})")
