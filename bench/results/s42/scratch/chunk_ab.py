"""Attention's chunk size (ops.CHUNK, part of the numerics) A/B: prefill of N random tokens and passes of 1 and 9
rows after it, default model bf16, each chunk size in turn, interleaved, medians.

    python bench/results/s42/scratch/chunk_ab.py N ROUNDS C1 C2 ...
"""
import statistics
import sys
import time

import torch

from verispec.api import Target
from verispec.model import fused, ops

torch.set_num_threads(2)
n, rounds, sizes = int(sys.argv[1]), int(sys.argv[2]), [int(c) for c in sys.argv[3:]]
model = Target.load(None, "bf16", "cpu").model
ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(0))
times = {}


def use(c):
    ops.CHUNK = fused.CHUNK = c


with torch.inference_mode():
    for r in range(rounds):
        for c in (sizes if r % 2 == 0 else sizes[::-1]):
            use(c)
            cache = model.new_cache(n + 32)
            t0 = time.perf_counter()
            model(ids, torch.arange(n)[None], cache)
            times.setdefault(("prefill", c), []).append(time.perf_counter() - t0)
            for rows in (1, 9):
                step = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    model(ids[:, :rows], torch.arange(n, n + rows)[None], cache)
                    step.append(time.perf_counter() - t0)
                    cache.truncate(n)
                times.setdefault((rows, c), []).append(statistics.median(step))
for key in ("prefill", 1, 9):
    print(key, "  ".join(f"chunk {c}: {statistics.median(times[(key, c)]) * 1e3:8.2f} ms" for c in sizes))
