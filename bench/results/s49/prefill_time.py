"""Median time of a prefill of T random tokens (default model), REPS runs: python prefill_time.py T REPS [DTYPE]"""
import sys, time, torch, statistics
from verispec.api import Target
torch.set_num_threads(2)
T, reps = int(sys.argv[1]), int(sys.argv[2])
model = Target.load(None, sys.argv[3] if len(sys.argv) > 3 else "bf16", "cpu").model
cache = model.new_cache(T + 8)
toks = torch.randint(0, 40000, (1, T), generator=torch.Generator().manual_seed(0))
ts = []
for _ in range(reps):
    with torch.inference_mode():
        cache.truncate(0); t0 = time.perf_counter()
        h = model(toks, torch.arange(T)[None], cache); model.logits(h[:, -1:])
    ts.append(time.perf_counter() - t0)
print(f"T={T}: prefill median {statistics.median(ts)*1e3:.1f} ms  ({T/statistics.median(ts):.0f} tok/s)", ts and [round(t*1e3) for t in ts])
