"""One layer's attention on the kernels (RoPE, cache write and attention: `attention_step`), the default model's
shapes (9 query heads, 3 key/value heads, 64 wide, bf16 cache), a chain of n rows after S cached keys: median ms
of 31 calls. Run it from two checkouts to compare versions side by side:

    python scripts/attention_speed.py
    PYTHONPATH=/path/to/other/checkout python scripts/checkout_run.py scripts/attention_speed.py
"""
import torch

from verispec import kernels
from verispec.model import ops
from verispec.model.kv_cache import KVCache

from tree_cost import median_time  # scripts/ is on the path when run as a script

torch.set_num_threads(2)
lib = kernels.load()


def median_ms(fn, repeats=31):
    return median_time(fn, repeats) * 1e3


for context in (256, 2048):
    line = []
    for n in (1, 9, 17, 65):
        cache = KVCache(1, 1, 3, context + 80, 64, torch.bfloat16, torch.device("cpu"))
        cache.layers[0][0].normal_(), cache.layers[0][1].normal_()
        cache.length = context
        rows = ops.Rows.plan([(cache, 0, n, None)])
        cos, sin, qkv = torch.randn(n, 32), torch.randn(n, 32), torch.randn(n, (9 + 2 * 3) * 64)
        ks, vs = rows.caches(0)
        ms = median_ms(lambda: lib.attention_step(qkv, cos, sin, ks, vs, rows.seq, rows.slot, rows.ctx, rows.extra,
                                                  rows.n_extra, 9, 64 ** -0.5, ops.CHUNK, False))
        line.append(f"{n} rows {ms:.3f} ms")
    print(f"context {context}: " + ", ".join(line), flush=True)
