"""The float product (bf16 weights, fp32 activations) on AVX2 against the best here, side by side: median ms of one
product per row count for the default model's shapes, with weights cached (the product's own speed, not memory's).
AVX-512 gives AVX2's bits (tests/test_invariance.py); AMX-BF16 tiles, the best where the CPU has them, give bits
of their own (kernels/famx.h). On a CPU without AVX-512 both columns run AVX2.
Usage: python scripts/fp_isa_speed.py"""
import torch

from verispec import kernels
from verispec.model import ops

from tree_cost import median_time  # scripts/ is on the path when run as a script

torch.set_num_threads(2)
lib = kernels.load()
lib.set_fp_isa("best")
print("best instruction set here:", lib.fp_isa())


def median_ms(fn, repeats=7):
    return median_time(fn, repeats) * 1e3


for n, k in ((3072, 576), (576, 1536), (49152, 576)):
    w = torch.randn(n, k).bfloat16()
    for m in (1, 4, 9, 17, 33, 65, 512):
        x = torch.randn(m, k)
        ms = {}
        try:
            for isa in ("avx2", "best"):
                lib.set_fp_isa(isa)
                panels = ops._panels(w)                     # the layout this product loads (AMX-BF16's, or not)
                ms[isa] = median_ms(lambda: lib.linear(x, panels, n, None))
        finally:
            lib.set_fp_isa("best")
        print(f"bf16 {n}x{k} rows {m:3d}: avx2 {ms['avx2']:.2f} ms  {lib.fp_isa()} {ms['best']:.2f} ms  "
              f"{ms['avx2'] / ms['best']:.2f}x  ({2 * m * n * k / ms['best'] / 1e6:.0f} GFLOP/s)", flush=True)
