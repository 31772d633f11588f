"""q8linear of two kernel builds on the Qwen 1.5B's layer-0/1 tensors and its output head, interleaved, medians of 40.
    python bench/results/s52/scratch/prod_ab.py OLD_BUILD_DIR NEW_BUILD_DIR ROWS,ROWS,..."""
import statistics, sys, time
from pathlib import Path
import gguf, numpy as np, torch
sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "scripts"))
from kernels_ab import load_build
from verispec.model import quant
from verispec.model.loader import home
A, B = load_build(Path(sys.argv[1])), load_build(Path(sys.argv[2]))
rows = [int(r) for r in sys.argv[3].split(",")]
path = home() / "downloads" / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
for name in ["blk.0.ffn_gate.weight", "blk.0.ffn_down.weight", "blk.1.ffn_down.weight", "blk.0.attn_q.weight", "token_embd.weight"]:
    t = tensors[name]
    kind, k, n = t.tensor_type.name, int(t.shape[0]), int(t.shape[1])
    p = quant.pack(np.asarray(t.data).reshape(n, -1), kind, n, k)
    for m in rows:
        x = torch.randn(m, k)
        fs = [lambda lib=lib: lib.q8linear(x, quant.TYPES[kind][2], p.q, p.sc, p.mn, p.d, p.dmin, n, None) for lib in (A, B)]
        assert torch.equal(fs[0](), fs[1]())
        ts = ([], [])
        for r in range(40):
            for i in (0, 1) if r % 2 else (1, 0):
                t0 = time.perf_counter(); fs[i](); ts[i].append(time.perf_counter() - t0)
        a, b = (1e3 * statistics.median(v) for v in ts)
        print(f"{name[:-7]:<16} {kind} {n}x{k} rows {m:>2}: old {a:7.3f} ms  new {b:7.3f} ms  new/old {b / a:4.2f}")
