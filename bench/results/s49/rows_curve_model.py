"""T(n)/T(1) of chain passes of n rows after C cached tokens for a named model, interleaved per round; medians.

    python bench/results/s49/rows_curve_model.py C 1,8,16,17 MODEL DTYPE [ROUNDS]    (e.g. qwen2.5-coder-1.5b gguf-q8 6)
"""
import statistics, sys, time, torch
from verispec.api import Target
from verispec.costs import primed_cache
torch.set_num_threads(2)
C, ns = int(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")]
model = Target.load(sys.argv[3], sys.argv[4], "cpu").model
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
