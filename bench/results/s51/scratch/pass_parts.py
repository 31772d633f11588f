"""The pair's 1.5B (gguf-q8) pass of n rows after 256 cached tokens: the layers, and the output head (logits),
timed apart, rounds interleaved over n; medians of 9.  python bench/results/s51/scratch/pass_parts.py [N,N,...]"""
import statistics
import sys
import time

import torch

from verispec.api import Target

rows = [int(n) for n in (sys.argv[1] if len(sys.argv) > 1 else "1,2,4,5,6,8,12,16").split(",")]
model = Target.load("qwen2.5-coder-1.5b", "gguf-q8").model
ctx = 256
cache = model.new_cache(ctx + 64)
with torch.inference_mode():
    model(torch.randint(0, 1000, (1, ctx)), torch.arange(ctx)[None], cache)
    times = {n: ([], []) for n in rows}
    for r in range(10):
        for n in rows:
            cache.truncate(ctx)
            t0 = time.perf_counter()
            h = model(torch.randint(0, 1000, (1, n)), torch.arange(ctx, ctx + n)[None], cache)
            t1 = time.perf_counter()
            model.logits(h)
            t2 = time.perf_counter()
            if r:
                times[n][0].append(t1 - t0)
                times[n][1].append(t2 - t1)
base = None
for n in rows:
    a, b = (1e3 * statistics.median(t) for t in times[n])
    base = base or a + b
    print(f"rows {n:>2}: layers {a:6.1f} ms  head {b:5.1f} ms  total {a + b:6.1f}  T/T(1) {(a + b) / base:4.2f}")
