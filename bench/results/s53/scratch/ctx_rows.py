"""The 1.5B's 3-row pass over its 1-row pass (logits included) after contexts of several lengths, interleaved
round by round; medians of 12 rounds' ratios.  python bench/results/s53/scratch/ctx_rows.py CTX,CTX,..."""
import statistics
import sys
import time

import torch

from verispec.api import Target

ctxs = [int(c) for c in sys.argv[1].split(",")]
model = Target.load("qwen2.5-coder-1.5b", "gguf-q8").model
caches = {}
with torch.inference_mode():
    for c in ctxs:
        caches[c] = model.new_cache(max(ctxs) + 16)
        model(torch.randint(0, 1000, (1, c)), torch.arange(c)[None], caches[c])
    ratio = {c: [] for c in ctxs}
    one = {c: [] for c in ctxs}
    for r in range(13):
        for c in ctxs:
            t = []
            for rows in (1, 3):
                caches[c].truncate(c)
                t0 = time.perf_counter()
                model.logits(model(torch.randint(0, 1000, (1, rows)), torch.arange(c, c + rows)[None], caches[c]))
                t.append(time.perf_counter() - t0)
            if r:
                ratio[c].append(t[1] / t[0])
                one[c].append(t[0])
for c in ctxs:
    print(f"context {c:4d}: 1 row {statistics.median(one[c]) * 1e3:5.1f} ms, 3 rows / 1 row "
          f"{statistics.median(ratio[c]):.2f}")
