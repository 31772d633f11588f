"""Two builds of the kernels on the default model's matrix products (the first layer's qkv, gate-up and down
shapes, and the output head), interleaved call by call in one process: by default a prefill's 1,200 rows, a
verification's 5 and a decoding step's 1, bf16a pair products. Also checks that both builds give the same bits.
2 threads.

    python scripts/products_ab.py BUILD_DIR_A BUILD_DIR_B [ROWS,...] [bf16a|bf16|fp16|fp32]

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
    if len(sys.argv) not in (3, 4, 5):
        print(__doc__.strip().splitlines()[5].strip(), file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    builds = [load_build(Path(d)) for d in sys.argv[1:3]]
    rows = [int(r) for r in (sys.argv[3] if len(sys.argv) > 3 else "1200,5,1").split(",")]
    kind = sys.argv[4] if len(sys.argv) > 4 else "bf16a"
    dtype = {"bf16a": torch.bfloat16, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[kind]
    model = Target.load(None, "bf16a" if kind == "bf16a" else "bf16", "cpu").model
    block = model.layers[0]
    weights = {"qkv": block.attn.wqkv.weight, "gate-up": block.mlp.w13.weight, "down": block.mlp.w2.weight,
               "lm_head": model.embed.weight}
    for M in rows:
        for name, weight in weights.items():
            N, K = weight.shape
            panels = ops._panels(weight.to(dtype), pairs=kind == "bf16a")
            x = torch.randn(M, K, generator=torch.Generator().manual_seed(M))
            times, outs = ([], []), [None, None]
            for _ in range(9 if M > 100 else 40 if name == "lm_head" else 200):
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
