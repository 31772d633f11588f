"""Whether two builds' integer products give the same bits: runs q8linear (AVX-512 VNNI) on synthetic packed
weights of every kind and the 1.5B's shapes, 1-20 rows, saves outputs to OUT.pt, or compares with an earlier OUT.
Usage: python q8_same_bits.py REPO OUT.pt [--compare OTHER.pt]"""
import sys
from pathlib import Path

repo = Path(sys.argv[1])
sys.path.insert(0, str(repo)), sys.path.insert(0, str(repo / "tests"))
import torch  # noqa: E402
from test_quant import random_blocks  # noqa: E402
from verispec import kernels  # noqa: E402
from verispec.model import quant  # noqa: E402

lib = kernels.load()
torch.set_num_threads(2)
out = {}
for isa in ("avx512", "avx2"):
    lib.set_q8_isa(isa)
    for kind, n, k in [("Q4_K", 512, 1536), ("Q6_K", 256, 8960), ("Q8_0", 256, 1536), ("Q5_0", 256, 1536),
                       ("Q4_1", 256, 1536)]:
        p = quant.pack(random_blocks(kind, n, k, seed=4), kind, n, k)
        g = torch.Generator().manual_seed(1)
        for m in list(range(1, 21)) + [64, 100]:
            x = torch.randn(m, k, generator=g) * 3
            out[f"{isa} {kind} {m}"] = quant.matmul_q8(x, p)
torch.save(out, sys.argv[2])
if "--compare" in sys.argv:
    other = torch.load(sys.argv[sys.argv.index("--compare") + 1])
    bad = [key for key in out if not torch.equal(out[key], other[key])]
    print("same bits" if not bad else f"DIFFER: {bad[:10]} ({len(bad)} of {len(out)})", f"({len(out)} products)")
