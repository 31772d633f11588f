"""The float product alone on the default model's shapes (bf16 weights, verispec's kernels), rows 1..32:
median ms per call, its ratio to one row, and the GFLOP/s it reaches (2 FLOP per multiply-add). 2 threads.

    python bench/results/s50/scratch/product_rows.py [ROWS,...] [DTYPE]
"""
import statistics
import sys
import time

import torch

from verispec import kernels
from verispec.model import ops

SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate-up": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}


@torch.inference_mode()
def main() -> None:
    rows = [int(r) for r in (sys.argv[1] if len(sys.argv) > 1 else "1,4,6,8,12,16,17,24,32").split(",")]
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}
    dtype = dtypes[sys.argv[2] if len(sys.argv) > 2 else "bf16"]
    torch.set_num_threads(2)
    lib = kernels.load()
    print(f"float product: {lib.fp_isa()}, {dtype}")
    for name, (N, K) in SHAPES.items():
        w = torch.randn(N, K, generator=torch.Generator().manual_seed(1)).to(dtype)
        panels = ops._panels(w)
        base = None
        for M in rows:
            x = torch.randn(M, K, generator=torch.Generator().manual_seed(M))
            reps = 30 if name == "lm_head" else 300
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                lib.linear(x, panels, N, None)
                ts.append(time.perf_counter() - t0)
            t = statistics.median(ts)
            base = base or t
            print(f"{name:8s} M={M:3d} {t * 1e3:8.3f} ms  x{t / base:5.2f}  {2 * M * N * K / t / 1e9:6.1f} GFLOP/s")


if __name__ == "__main__":
    main()
