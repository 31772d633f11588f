"""The integer product (`q8linear`, --dtype gguf-q8) of two kernel source trees, side by side in one process: each
tree is built (once, under $VERISPEC_HOME/kernels/ab-*), then both run on the same synthetic packed weights of the
1.5B's shapes, call by call interleaved, and each prints its median ms by row count. 2 threads.

    python scripts/q8_builds_ab.py SOURCES_A SOURCES_B [CALLS]

SOURCES_*: a `verispec/kernels` folder, e.g. of a worktree of another commit (`git worktree add /tmp/old HEAD~1`,
then /tmp/old/verispec/kernels). CALLS: per build and shape, default 15."""
import hashlib
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_quant import random_blocks  # noqa: E402  (synthetic GGUF blocks)

from verispec import kernels  # noqa: E402
from verispec.model import quant  # noqa: E402

SHAPES = [("Q4_K", 8960, 1536), ("Q4_K", 1536, 8960), ("Q6_K", 1536, 8960), ("Q6_K", 151936 // 8, 1536)]


def build(folder: Path):
    key = hashlib.sha1(b"".join(p.read_bytes() for p in folder.iterdir() if p.suffix in (".cpp", ".h"))).hexdigest()[:12]
    return kernels.compile_extension(f"verispec_ab_{key}", [folder / p.name for p in kernels.SOURCES],
                                     kernels.build_dir().parent / f"ab-{key}")


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print("usage: python scripts/q8_builds_ab.py SOURCES_A SOURCES_B [CALLS]", file=sys.stderr)
        return 2
    torch.set_num_threads(2)
    builds = [build(Path(a)) for a in sys.argv[1:3]]
    calls = int(sys.argv[3]) if len(sys.argv) == 4 else 15
    print("instruction sets:", [b.q8_isa() for b in builds])
    for kind, n, k in SHAPES:
        p = quant.pack(random_blocks(kind, n, k, seed=4), kind, n, k)
        for m in (1, 2, 4, 5, 8, 16, 32):
            x = torch.randn(m, k)
            times = [[], []]
            for _ in range(calls):
                for i, b in enumerate(builds):
                    t = time.perf_counter()
                    b.q8linear(x, quant.TYPES[kind][2], p.q, p.sc, p.mn, p.d, p.dmin, p.n, None)
                    times[i].append(time.perf_counter() - t)
            a, b = (statistics.median(t) * 1e3 for t in times)
            print(f"{kind} {n}x{k} rows {m:2d}: A {a:.3f} ms  B {b:.3f} ms  A/B {a / b:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
