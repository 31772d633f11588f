"""The bf16 AMX product with its activations split the old way (read across cores) and the new (each thread its
own), for the default model's layer shapes, synthetic weights held in cache; checks the bits are equal.

    python bench/results/s49/scratch/split_ab.py            (an AMX-BF16 machine)
"""
import statistics
from pathlib import Path

import torch

from verispec import kernels
from verispec.model.ops import _panels

torch.set_num_threads(2)
here = Path(__file__).parent
ext = kernels.compile_extension("split_ab", [here / "split_ab.cpp"], kernels.build_dir().parent / "s49-split-ab",
                                [Path(kernels.__file__).parent])
g = torch.Generator().manual_seed(0)
for M in (1, 8, 16, 17, 128, 1500):
    for name, (N, K) in {"qkv": (960, 576), "o": (576, 576), "w13": (3072, 576), "w2": (576, 1536)}.items():
        W = (torch.randn(N, K, generator=g) * 0.05).bfloat16()
        wp = _panels(W, amx=True)
        x = torch.randn(M, K, generator=g)
        assert torch.equal(ext.run(x, wp, N, True), ext.run(x, wp, N, False)), "bits differ"
        reps = 200 if M <= 17 else 20 if M == 128 else 3
        old, new = [], []
        for _ in range(7):
            old.append(ext.seconds(x, wp, N, True, reps))
            new.append(ext.seconds(x, wp, N, False, reps))
        a, b = statistics.median(old) * 1e6, statistics.median(new) * 1e6
        print(f"M={M:4d} {name:4s}: old {a:8.1f} us  new {b:8.1f} us  {b / a:.2f}x  (same bits)", flush=True)
