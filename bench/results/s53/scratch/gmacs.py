"""GMAC/s of this build's q8linear on the Qwen 1.5B's tensors, by row count (medians of 20).
    python bench/results/s53/scratch/gmacs.py ROWS,ROWS,..."""
import statistics, sys, time
import gguf, numpy as np, torch
from verispec import kernels
from verispec.model import quant
from verispec.model.loader import home
lib = kernels.load()
rows = [int(r) for r in sys.argv[1].split(",")]
path = home() / "downloads" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
for name in sys.argv[2].split(",") if len(sys.argv) > 2 else ["blk.0.ffn_gate.weight", "blk.0.ffn_down.weight",
                                                              "blk.1.ffn_down.weight", "blk.0.attn_q.weight"]:
    t = tensors[name]
    kind, k, n = t.tensor_type.name, int(t.shape[0]), int(t.shape[1])
    p = quant.pack(np.asarray(t.data).reshape(n, -1), kind, n, k)
    line = []
    for m in rows:
        x = torch.randn(m, k)
        f = lambda: lib.q8linear(x, quant.TYPES[kind][2], p.q, p.sc, p.mn, p.d, p.dmin, n, None)
        ts = []
        for r in range(20):
            t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
        line.append(f"{m}:{m * n * k / statistics.median(ts) / 1e9:5.0f}")
    print(f"{name[:-7]:<16} {kind} {n}x{k} GMAC/s", " ".join(line))
