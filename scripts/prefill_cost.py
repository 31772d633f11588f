"""Prefill cost: seconds to prefill N random tokens (default 3,000) with the default model, bf16, 2 threads, the
first token's logits included; and one layer's attention over the same rows. Run it from two checkouts to compare:

    python scripts/prefill_cost.py [N]
    PYTHONPATH=/path/to/other/checkout python scripts/prefill_cost.py [N]
"""
import sys
import time

import torch

from verispec import kernels
from verispec.api import Target
from verispec.model import ops
from verispec.model.kv_cache import KVCache

torch.set_num_threads(2)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
cache = KVCache(1, 1, 3, n, 64, torch.bfloat16, torch.device("cpu"))
rows = ops.Rows.plan([(cache, 0, n, None)])
ks, vs = rows.caches(0)
args = (torch.randn(n, 960), torch.randn(n, 32), torch.randn(n, 32), ks, vs, rows.seq, rows.slot, rows.ctx,
        rows.extra, rows.n_extra, 9, 0.125, ops.CHUNK)
times = []
for _ in range(3):
    t0 = time.perf_counter()
    kernels.load().attention_step(*args)
    times.append(time.perf_counter() - t0)
print(f"attention, one layer, {n} causal rows: {sorted(times)[1] * 1e3:.0f} ms (median of 3)")
model = Target.load(None, "bf16", "cpu").model
ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(0))
times = []
for _ in range(3):
    c = model.new_cache(n + 8)
    t0 = time.perf_counter()
    model.logits(model(ids, torch.arange(n)[None], c)[:, -1:])
    times.append(time.perf_counter() - t0)
print(f"prefill of {n} tokens: {sorted(times)[1]:.2f} s, {n / sorted(times)[1]:.0f} tokens/s (median of 3)")
