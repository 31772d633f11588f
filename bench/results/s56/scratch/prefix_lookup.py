"""Time PrefixCache.match and keep with N kept 20-token prompts (each beginning its own way), this tree's against
another tree's (session 55: a worktree at /tmp/old): python bench/results/s56/scratch/prefix_lookup.py ROOT N"""
import importlib.util
import statistics
import sys
import time

import torch

spec = importlib.util.spec_from_file_location("prefix", sys.argv[1] + "/verispec/serve/prefix.py")
prefix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prefix)
n = int(sys.argv[2])


class FakeCache:
    def __init__(self, ids):
        self.k = torch.zeros(30, 3, len(ids), 64)

    def prefix(self, m):
        return self.k[:, :, :m].clone(), self.k[:, :, :m].clone()


cache = prefix.PrefixCache(1 << 14)
for i in range(n):
    ids = [1000 + i] + list(range(19))
    cache.keep(ids, FakeCache(ids), torch.zeros(len(ids), 576))
times = []
for i in range(20):
    t0 = time.perf_counter()
    cache.match([1000 + i] + list(range(30)))
    times.append(time.perf_counter() - t0)
print(f"{sys.argv[1]}: {n} entries, match median {statistics.median(times) * 1e3:.2f} ms")
