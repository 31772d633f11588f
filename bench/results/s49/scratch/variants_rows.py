"""Scratch (session 49): famx_linear against variants (variants.cpp) for the default model's shapes, synthetic
weights. python bench/results/s49/scratch/variants_rows.py ROWS[,ROWS...] VARIANT[,VARIANT...]
e.g. `1500,128 7,8,9,10,11` or `1500,128 20,21,22` or `1,4,8,12,16 1,2` (2 only up to 8 rows)."""
import statistics, sys, torch
from pathlib import Path
from verispec import kernels
from verispec.model.ops import _panels
torch.set_num_threads(2)
here = Path(__file__).parent
ext = kernels.compile_extension("s49_variants", [here / "variants.cpp"], kernels.build_dir().parent / "s49-variants",
                                [Path(kernels.__file__).parent])
shapes = {"qkv": (960, 576), "o": (576, 576), "w13": (3072, 576), "w2": (576, 1536)}
rows, variants = [int(a) for a in sys.argv[1].split(",")], [int(a) for a in sys.argv[2].split(",")]
g = torch.Generator().manual_seed(0)
for M in rows:
    for name, (N, K) in shapes.items():
        W = (torch.randn(N, K, generator=g) * 0.05).bfloat16()
        wps = [_panels(W, amx=True)]
        x = torch.randn(M, K, generator=g)
        ts = {v: [] for v in [0] + variants}
        for _ in range(7):
            for v in ts: ts[v].append(ext.bench(x, wps, N, v, 5 if M > 16 else 50))
        med = {v: statistics.median(t) * 1e6 for v, t in ts.items()}
        print(f"M={M} {name:4s}: now {med[0]:9.1f} us  " + " ".join(f"v{v}: {med[v] / med[0]:.2f}x" for v in variants))
