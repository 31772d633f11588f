"""GMAC/s of the integer product on AVX-512 VNNI (q8linear), synthetic packed weights of the 1.5B's shapes, by
row count, 2 threads, median of 21 calls. Usage: python vnni_gmacs.py [REPO]  (REPO: whose verispec to import)"""
import statistics
import sys
import time
from pathlib import Path

repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[4])
sys.path.insert(0, str(repo)), sys.path.insert(0, str(repo / "tests"))
import torch  # noqa: E402
from test_quant import random_blocks  # noqa: E402
from verispec import kernels  # noqa: E402
from verispec.model import quant  # noqa: E402

lib = kernels.load()
torch.set_num_threads(2)
lib.set_q8_isa("avx512")
print("repo", repo, "isa", lib.q8_isa())
for kind, n, k in [("Q4_K", 8960, 1536), ("Q6_K", 1536, 8960)]:
    p = quant.pack(random_blocks(kind, n, k, seed=4), kind, n, k)
    for m in (1, 4, 8, 12, 16):
        x = torch.randn(m, k)
        quant.matmul_q8(x, p)
        times = []
        for _ in range(21):
            t = time.perf_counter()
            quant.matmul_q8(x, p)
            times.append(time.perf_counter() - t)
        ms = statistics.median(times) * 1e3
        print(f"{kind} {n}x{k} rows {m:3d}: {ms:.2f} ms  {m * n * k / ms / 1e6:.0f} GMAC/s", flush=True)
