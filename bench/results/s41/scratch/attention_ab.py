"""Two builds of the kernels on one layer's bf16a attention (`attention_step`: RoPE, cache write, attention with the
cache's store of laid-out chunks), the default model's shapes, interleaved call by call in one process: a causal
prefill of N rows (default 3,000), then chains of 1, 5 and 16 rows after it. Checks that both builds give the same
bits and prints each build's median and B/A. 2 threads:

    python scripts/attention_ab.py BUILD_DIR_A BUILD_DIR_B [N] [ROUNDS]

A build directory is `verispec.kernels.build_dir()` of a checkout after one `kernels.load()` (scripts/kernels_ab.py).
"""
import statistics
import sys
import time
from pathlib import Path

import torch

from verispec.model import ops
from verispec.model.kv_cache import KVCache

from kernels_ab import load_build  # scripts/ is on the path when run as a script


def call(k, cache: KVCache, n: int, seed: int, times: list) -> torch.Tensor:
    """One attention_step over n new rows of `cache` (layer 0), random projections drawn from `seed`; appends the
    kernel call's seconds to `times`."""
    g = torch.Generator().manual_seed(seed)
    rows = ops.Rows.plan([(cache, 0, n, None)])
    ks, vs = rows.caches(0)
    qkv, cos, sin = torch.randn(n, 960, generator=g), torch.randn(n, 32, generator=g), torch.randn(n, 32, generator=g)
    args = (qkv, cos, sin, ks, vs, rows.seq, rows.slot, rows.ctx, rows.extra, rows.n_extra, 9, 0.125, ops.CHUNK, True,
            *rows.panels(0, True))
    t0 = time.perf_counter()
    out = k.attention_step(*args)
    times.append(time.perf_counter() - t0)
    cache.length += n
    return out


def main() -> int:
    torch.set_num_threads(2)
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    builds = [load_build(Path(a)) for a in sys.argv[1:3]]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    caches = [KVCache(1, 1, 3, n + 64, 64, torch.bfloat16, torch.device("cpu")) for _ in builds]
    times: dict = {}
    same = True
    for _ in range(rounds):
        outs = []
        for k, cache in zip(builds, caches):
            cache.truncate(0)
            outs.append(call(k, cache, n, 0, times.setdefault(("prefill", k), [])))
        same = same and torch.equal(*outs)
        for rows in (1, 5, 16):
            for _ in range(5):
                outs = []
                for k, cache in zip(builds, caches):
                    outs.append(call(k, cache, rows, rows, times.setdefault((rows, k), [])))
                    cache.truncate(n)
                same = same and torch.equal(*outs)
    for key in ("prefill", 1, 5, 16):
        a, b = (statistics.median(times[(key, k)]) * 1e3 for k in builds)
        what = f"{n}-row prefill" if key == "prefill" else f"{key} rows after {n}"
        print(f"one layer's attention, {what:>17}: A {a:8.3f} ms, B {b:8.3f} ms, B/A {b / a:.2f}")
    print(f"same bits: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
