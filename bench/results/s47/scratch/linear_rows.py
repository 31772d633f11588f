"""The bf16 product's time at M rows relative to one row, per layer shape of the default model (kernels' `linear`).

    python bench/results/s47/scratch/linear_rows.py 1,8,16,17,24,32
"""
import statistics, sys, time, torch
from verispec import kernels
from verispec.api import Target
torch.set_num_threads(2)
ms = [int(x) for x in sys.argv[1].split(",")]
model = Target.load(None, "bf16", "cpu").model
k = kernels.load()
b = model.layers[0]
layers = {"qkv": b.attn.wqkv, "o": b.attn.wo, "w13": b.mlp.w13, "w2": b.mlp.w2, "head": model.lm_head}
for name, lin in layers.items():
    panels, bias = lin.panels()
    N, K = lin.weight.shape
    xs = {m: torch.randn(m, K) for m in ms}
    t = {m: [] for m in ms}
    reps = 5 if name == "head" else 30
    for _ in range(9):
        for m in ms:
            t0 = time.perf_counter()
            for _ in range(reps): k.linear(xs[m], panels, N, bias)
            t[m].append((time.perf_counter() - t0) / reps)
    t1 = statistics.median(t[ms[0]])
    print(f"{name:5s} {N}x{K}: T(1) {t1*1e6:7.1f} us  " + " ".join(f"{m}:{statistics.median(v)/t1:.2f}" for m, v in t.items()))
