"""q8linear's time and multiply-adds per second by row count, on the 1.5B's layer-0 weights (one thread).
    python bench/results/s51/scratch/q8_rows.py [THREADS] [ROWS]"""
import statistics
import sys
import time

import gguf
import numpy as np
import torch

from verispec import kernels
from verispec.model import quant
from verispec.model.loader import home

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
rows = [int(r) for r in (sys.argv[2] if len(sys.argv) > 2 else "1,2,3,4,6,8,12,16").split(",")]
torch.set_num_threads(threads)
lib = kernels.load()
print("isa", lib.q8_isa(), "threads", threads)
path = home() / "downloads" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
for name in ["blk.0.ffn_gate.weight", "blk.0.ffn_down.weight", "blk.0.attn_q.weight"]:
    t = tensors[name]
    kind, k, n = t.tensor_type.name, int(t.shape[0]), int(t.shape[1])
    p = quant.pack(np.asarray(t.data).reshape(n, -1), kind, n, k)
    base = None
    for m in rows:
        x = torch.randn(m, k)
        f = lambda: lib.q8linear(x, quant.TYPES[kind][2], p.q, p.sc, p.mn, p.d, p.dmin, n, None)  # noqa: E731
        f()
        ts = []
        for _ in range(30):
            t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
        ms = 1e3 * statistics.median(ts)
        base = base or ms
        print(f"{name[6:-7]:<9} {kind} {n}x{k} rows {m:>2}: {ms:7.3f} ms  x{ms / base:5.2f}  {m * n * k / ms / 1e6:6.1f} GMAC/s")
