"""The bf16a pair product against the bf16 product, the default model's shapes (the fused q-k-v, gate-up, down
and output-head matrices), 1 to 512 rows, medians of 20 calls, 2 threads; then both forced to AVX2 (where bf16a
runs its FMA steps instead of vdpbf16ps: the same bits, its speed there):

    python scripts/bf16a_products.py
"""
import statistics
import time

import torch

from verispec import kernels
from verispec.model import ops

torch.set_num_threads(2)
lib = kernels.load()


def median_ms(fn, n=20):
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


print(f"bf16a's product: {lib.pairs_isa()}")
for n, k in [(3072, 576), (576, 1536), (960, 576), (49152, 576)]:
    w = (torch.randn(n, k) * 0.1).to(torch.bfloat16)
    fp, pairs = ops._panels(w, amx=False), ops._panels(w, pairs=True)
    for m in (1, 4, 16, 64, 512):
        x = torch.randn(m, k)
        a, b = median_ms(lambda: lib.linear(x, fp, n, None)), median_ms(lambda: lib.linear(x, pairs, n, None))
        lib.set_fp_isa("avx2")
        try:
            c, d = median_ms(lambda: lib.linear(x, fp, n, None)), median_ms(lambda: lib.linear(x, pairs, n, None))
        finally:
            lib.set_fp_isa("best")
        print(f"{n}x{k}, {m:3d} rows: bf16 {a:7.3f} ms, bf16a {b:7.3f} ms, {a / b:.2f}x | AVX2: bf16 {c:7.3f}, "
              f"bf16a {d:7.3f}, {c / d:.2f}x", flush=True)
