"""What 2 threads read from memory here: torch's fp32 sum over 1.1 GB (the 1.5B's weights, once), 5 rounds."""
import time

import torch

torch.set_num_threads(2)
y = torch.ones(1100 * 2 ** 20 // 4, dtype=torch.float32)
for r in range(5):
    t0 = time.perf_counter()
    y.sum()
    dt = time.perf_counter() - t0
    print(f"fp32 sum of 1.1 GB: {dt * 1e3:.1f} ms = {y.numel() * 4 / dt / 1e9:.1f} GB/s")
