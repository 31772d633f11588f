import sys, time, statistics, torch
sys.path.insert(0, "scripts")
from kernels_ab import load_build
from pathlib import Path
from verispec.model import loader, quant
torch.set_num_threads(2)
A, B = [load_build(Path(d)) for d in sys.argv[1:3]]
m, tok, _ = loader.load("qwen2.5-coder-1.5b", "gguf-q8")
blk = m.layers[0]
for name, lin in (("w13", blk.mlp.w13), ("w2", blk.mlp.w2), ("wqkv", blk.attn.wqkv)):
    for p in lin.quant:
        for M in (1, 2, 5, 8):
            x = torch.randn(M, p.k)
            args = (x, quant.TYPES[p.kind][2], p.q, p.sc, p.mn, p.d, p.dmin, p.n, None)
            res = ([], [])
            outs = [None, None]
            for _ in range(60):
                for i, lib in enumerate((A, B)):
                    t0 = time.perf_counter(); outs[i] = lib.q8linear(*args); res[i].append(time.perf_counter() - t0)
            a, b = statistics.median(res[0]) * 1e3, statistics.median(res[1]) * 1e3
            print(f"{name} {p.kind} {p.n}x{p.k} M={M}: A {a:.3f} B {b:.3f} B/A {b/a:.2f} same {torch.equal(outs[0], outs[1])}", flush=True)
