"""T(n)/T(1) of chain passes of n rows after C cached tokens, interleaved per round; medians.

    python bench/results/s49/rows_curve.py C 1,8,15,16,17,18,24,32,33 [DTYPE [MODEL [ROUNDS]]]
    (e.g. `256 1,8,16,17 gguf-q8 qwen2.5-coder-1.5b 6`; default: bf16, the default model, 16 rounds)
"""
import statistics, sys, time, torch
from verispec.api import Target
from verispec.costs import primed_cache
torch.set_num_threads(2)
C, ns = int(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")]
dtype, name = (sys.argv[3:5] + ["bf16", None][len(sys.argv[3:5]):])
model = Target.load(name, dtype, "cpu").model
cache = primed_cache(model, C, max(ns) + 2, torch.Generator().manual_seed(0))
times = {n: [] for n in ns}
for _ in range(int(sys.argv[5]) if len(sys.argv) > 5 else 16):
    for n in ns:
        cache.truncate(C); t0 = time.perf_counter()
        with torch.inference_mode():
            model.logits(model(torch.randint(0, 1000, (1, n)), torch.arange(C, C + n)[None], cache))
        times[n].append(time.perf_counter() - t0)
rel = {n: statistics.median([a / b for a, b in zip(t[1:], times[ns[0]][1:])]) for n, t in times.items()}
print(f"C={C} T({ns[0]})={statistics.median(times[ns[0]][1:])*1e3:.2f} ms  " + " ".join(f"{n}:{v:.3f}" for n, v in rel.items()))
