"""The integer product (`q8linear`, --dtype gguf-q8) on AVX2, AVX-512 VNNI and the best here (AMX tiles from 8 rows
where the CPU has AMX), side by side: median ms of 15 calls over synthetic packed weights of the 1.5B's shapes, by
row count, 2 threads. Same bits with each (tests/test_quant.py). A CPU without VNNI or AMX runs what it has in
those columns. Usage: python scripts/q8_isa_speed.py"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_quant import random_blocks  # noqa: E402  (synthetic GGUF blocks)

from verispec import kernels  # noqa: E402
from verispec.model import quant  # noqa: E402

lib = kernels.load()
torch.set_num_threads(2)
print("best instruction set here:", lib.q8_isa())
for kind, n, k in [("Q4_K", 8960, 1536), ("Q6_K", 1536, 8960), ("Q8_0", 8960, 1536)]:
    p = quant.pack(random_blocks(kind, n, k, seed=4), kind, n, k)
    for m in (1, 2, 4, 8, 16, 32, 64):
        x = torch.randn(m, k)
        ms = {}
        for isa in ("avx2", "avx512", "best"):
            lib.set_q8_isa(isa)
            quant.matmul_q8(x, p)
            times = []
            for _ in range(15):
                t = time.perf_counter()
                quant.matmul_q8(x, p)
                times.append(time.perf_counter() - t)
            ms[isa] = statistics.median(times) * 1e3
        lib.set_q8_isa("best")
        print(f"{kind} {n}x{k} rows {m:3d}: avx2 {ms['avx2']:.2f} ms  avx512 {ms['avx512']:.2f} ms  "
              f"{lib.q8_isa()} {ms['best']:.2f} ms  best/avx512 {ms['avx512'] / ms['best']:.2f}  "
              f"{m * n * k / ms['best'] / 1e6:.0f} GMAC/s", flush=True)
