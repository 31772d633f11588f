"""Two builds of the kernels on the default model's bf16a matrix products (the first layer's qkv, gate-up and down
shapes), interleaved call by call in one process: a prefill's 1,200 rows, a verification's 5 and a decoding
step's 1. Also checks that both builds give the same bits. 2 threads.

    python scripts/products_ab.py BUILD_DIR_A BUILD_DIR_B

(build directories as for scripts/kernels_ab.py)
"""
import statistics
import sys
import time
from pathlib import Path

import torch

from verispec.api import Target
from verispec.model import ops

from kernels_ab import load_build    # scripts/, beside this file


@torch.inference_mode()
def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[4].strip(), file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    builds = [load_build(Path(d)) for d in sys.argv[1:]]
    block = Target.load(None, "bf16a", "cpu").model.layers[0]
    for M in (1200, 5, 1):
        for name, lin in (("qkv", block.attn.wqkv), ("gate-up", block.mlp.w13), ("down", block.mlp.w2)):
            N, K = lin.weight.shape
            panels = ops._panels(lin.weight, pairs=True)
            x = torch.randn(M, K, generator=torch.Generator().manual_seed(M))
            times, outs = ([], []), [None, None]
            for _ in range(9 if M > 100 else 200):
                for i, lib in enumerate(builds):
                    t0 = time.perf_counter()
                    outs[i] = lib.linear(x, panels, N, None)
                    times[i].append(time.perf_counter() - t0)
            a, b = (statistics.median(t) * 1e3 for t in times)
            same = torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))
            print(f"{name:8s} {M:5d} x {K} -> {N}: A {a:7.3f} ms  B {b:7.3f} ms  B/A {b / a:.2f}  same bits: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
