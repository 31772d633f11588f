"""A one-row decoding step of the default model after N tokens of context (100, 1,000, 3,000), and the part of it
that is attention: the step's median ms (logits excluded), and one row's attention over each of the model's 30
layers' caches in turn (`attention_step`, as the step calls it, bf16a with the cache's laid-out chunks). bf16 or
bf16a (its pair attention), 2 threads:

    python scripts/long_decode_cost.py [DTYPE]
"""
import statistics
import sys
import time

import torch

from verispec import kernels
from verispec.api import Target
from verispec.model import ops

dtype = sys.argv[1] if len(sys.argv) > 1 else "bf16a"
if dtype not in ("bf16", "bf16a"):
    sys.exit(f"long_decode_cost: DTYPE must be bf16 or bf16a, got {dtype!r}")
torch.set_num_threads(2)
model = Target.load(None, dtype, "cpu").model
lib, cfg = kernels.load(), model.cfg
heads, d = cfg.num_heads, cfg.head_dim
with torch.inference_mode():
    for n in (100, 1000, 3000):
        ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(n))
        cache = model.new_cache(n + 8)
        model(ids, torch.arange(n)[None], cache)
        steps = []
        for _ in range(15):
            t0 = time.perf_counter()
            model(ids[:, -1:], torch.tensor([[n]]), cache)
            steps.append(time.perf_counter() - t0)
            cache.truncate(n)
        rows = ops.Rows.plan([(cache, 0, 1, None)])
        qkv = torch.randn(1, (heads + 2 * cfg.num_kv_heads) * d)
        cos, sin = torch.randn(1, d // 2), torch.randn(1, d // 2)
        attention = []
        for _ in range(5):
            t0 = time.perf_counter()
            for layer in range(cfg.num_layers):
                ks, vs = rows.caches(layer)
                lib.attention_step(qkv, cos, sin, ks, vs, rows.seq, rows.slot, rows.ctx, rows.extra, rows.n_extra,
                                   heads, d ** -0.5, ops.CHUNK, dtype == "bf16a", *rows.panels(layer, dtype == "bf16a"))
            attention.append(time.perf_counter() - t0)
        print(f"{dtype}, {n} tokens of context: step {statistics.median(steps) * 1e3:.2f} ms, its attention (all "
              f"layers) {statistics.median(attention) * 1e3:.2f} ms", flush=True)
