"""Prefill cost: seconds to prefill N random tokens (default 3,000) with the default model, bf16 (or DTYPE: bf16a,
whose attention takes the bf16 pair products), 2 threads, the first token's logits included; and one layer's
attention over the same rows. Run it from two checkouts to compare:

    python scripts/prefill_cost.py [N] [DTYPE]
    PYTHONPATH=/path/to/other/checkout python scripts/checkout_run.py scripts/prefill_cost.py [N] [DTYPE]
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
dtype = sys.argv[2] if len(sys.argv) > 2 else "bf16"
if dtype not in ("bf16", "bf16a"):
    sys.exit(f"prefill_cost: DTYPE must be bf16 or bf16a, got {dtype!r}")
cache = KVCache(1, 1, 3, n, 64, torch.bfloat16, torch.device("cpu"))
rows = ops.Rows.plan([(cache, 0, n, None)])
ks, vs = rows.caches(0)
args = (torch.randn(n, 960), torch.randn(n, 32), torch.randn(n, 32), ks, vs, rows.seq, rows.slot, rows.ctx,
        rows.extra, rows.n_extra, 9, 0.125, ops.CHUNK, dtype == "bf16a")


def median_of_3(fn) -> float:
    """Seconds: the median of three calls (no warm-up call: a long prefill is its own warm-up)."""
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[1]


attention = median_of_3(lambda: kernels.load().attention_step(*args))
print(f"{dtype} attention, one layer, {n} causal rows: {attention * 1e3:.0f} ms (median of 3)")
model = Target.load(None, dtype, "cpu").model
ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(0))
caches = iter([model.new_cache(n + 8) for _ in range(3)])          # made outside the timed calls
prefill = median_of_3(lambda: model.logits(model(ids, torch.arange(n)[None], next(caches))[:, -1:]))
print(f"{dtype} prefill of {n} tokens: {prefill:.2f} s, {n / prefill:.0f} tokens/s (median of 3)")
