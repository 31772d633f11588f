"""Prefill seconds of N random tokens (512, 1,024, 3,000), the default model in bf16 against bf16a, alternating,
medians of 3, 2 threads, the first token's logits included:

    python scripts/prefill_bf16a.py
"""
import statistics
import time

import torch

from verispec.api import Target

torch.set_num_threads(2)
models = {d: Target.load(None, d, "cpu").model for d in ("bf16", "bf16a")}
for n in (512, 1024, 3000):
    ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(n))
    t = {d: [] for d in models}
    for _ in range(3):
        for d, m in models.items():
            cache = m.new_cache(n + 1)
            t0 = time.perf_counter()
            with torch.inference_mode():
                m.logits(m(ids, torch.arange(n)[None], cache)[:, -1:])
            t[d].append(time.perf_counter() - t0)
    a, b = statistics.median(t["bf16"]), statistics.median(t["bf16a"])
    print(f"prefill {n} tokens: bf16 {a:.2f} s, bf16a {b:.2f} s, {a / b:.2f}x", flush=True)
