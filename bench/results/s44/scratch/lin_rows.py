"""One layer's products of the default model (bf16 panels, this machine's kernel) with R rows, in a loop over
all 30 layers' weights (so each call streams its weights from memory, as in a pass): median us per layer."""
import sys, time, statistics, torch
from verispec.api import Target
torch.set_num_threads(2)
t = Target.load("smollm2-135m", "bf16", "cpu", "auto")
layers = t.model.layers
from verispec import kernels
k = kernels.load()
names = None
for R in [1, 2, 4, 9, 16, 17, 1, 9]:
    xs = {}
    per = {}
    for rep in range(12):
        for L in layers:
            mods = [("qkv", L.attn.qkv if hasattr(L.attn, "qkv") else None)]
            for name, mod in L.named_modules():
                if hasattr(mod, "panels") and name:
                    panels, b = mod.panels()
                    K = mod.weight.shape[1]
                    x = xs.setdefault(K, torch.randn(R, K))
                    t0 = time.perf_counter(); k.linear(x, panels, mod.weight.shape[0], b); t1 = time.perf_counter()
                    per.setdefault(name, []).append(t1 - t0)
    print(R, {n: round(statistics.median(v) * 1e6) for n, v in per.items()},
          "sum", round(sum(statistics.median(v) for v in per.values()) * 1e6))
