"""Scratch (session 49): famx_linear's split with blocks of 4, 8 (as shipped), 16 and 32 row tiles.
python bench/results/s49/scratch/variants_blocks.py"""
import statistics, torch
from pathlib import Path
from verispec import kernels
from verispec.model.ops import _panels
torch.set_num_threads(2)
here = Path(__file__).parent
ext = kernels.compile_extension("s49_variants", [here / "variants.cpp"], kernels.build_dir().parent / "s49-variants",
                                [Path(kernels.__file__).parent])
g = torch.Generator().manual_seed(0)
for M in (512, 1500):
    for name, (N, K) in {"qkv": (960, 576), "o": (576, 576), "w13": (3072, 576), "w2": (576, 1536)}.items():
        W = (torch.randn(N, K, generator=g) * 0.05).bfloat16()
        wp = _panels(W, amx=True)
        x = torch.randn(M, K, generator=g)
        r = {t: [] for t in (4, 8, 16, 32)}
        for _ in range(5):
            for t in r: r[t].append(ext.own_split(x, wp, N, 3, t))
        med = {t: statistics.median(v) * 1e6 for t, v in r.items()}
        print(f"M={M} {name:4s}: 8 tiles {med[8]:8.1f} us  " + " ".join(f"{t}: {med[t] / med[8]:.2f}x" for t in med if t != 8))
