"""Time (or profile) one tree pass of n nodes vs a chain of n after C cached tokens.

    python bench/results/s47/scratch/tree_pass.py C N [--profile]
"""
import statistics, sys, time, torch
from verispec.api import Target
from verispec.costs import primed_cache
from verispec.tree import build_tree, topk_per_depth
torch.set_num_threads(2)
C, N = int(sys.argv[1]), int(sys.argv[2])
model = Target.load(None, "bf16", "cpu").model
g = torch.Generator().manual_seed(0)
cache = primed_cache(model, C, N + 2, g)
tree = build_tree(list(topk_per_depth([2] * 8, max_nodes=1024).choices[:N]))
mask = torch.cat([torch.ones(N + 1, C, dtype=torch.bool), tree.ancestry], 1)[None]
shapes = {"one": (torch.randint(0, 1000, (1, 1)), torch.tensor([[C]]), None),
          "chain": (torch.randint(0, 1000, (1, N + 1)), torch.arange(C, C + N + 1)[None], None),
          "tree": (torch.randint(0, 1000, (1, N + 1)), (C + torch.tensor(tree.depths))[None], mask)}
def run(s):
    t, p, m = shapes[s]; cache.truncate(C)
    with torch.inference_mode():
        model.logits(model(t, p, cache, m))
if "--profile" in sys.argv:
    import cProfile, pstats
    for _ in range(3): run("tree")
    cProfile.run("for _ in range(30): run('tree')", "/tmp/tree.prof")
    pstats.Stats("/tmp/tree.prof").sort_stats("cumtime").print_stats(25); sys.exit()
times = {s: [] for s in shapes}
for _ in range(21):
    for s in shapes:
        t0 = time.perf_counter(); run(s); times[s].append(time.perf_counter() - t0)
for s, t in times.items():
    print(f"{s}: {statistics.median(t[1:]) * 1e3:.2f} ms")
