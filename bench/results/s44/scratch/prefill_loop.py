"""Prefills of N random tokens (default model, bf16, 2 threads), REPS times, for perf: the time of each."""
import sys, time, torch
from verispec.api import Target
torch.set_num_threads(2)
n, reps = int(sys.argv[1]), int(sys.argv[2])
m = Target.load(None, "bf16", "cpu").model
ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(0))
caches = [m.new_cache(n + 8) for _ in range(reps)]
with torch.inference_mode():
    for c in caches:
        t0 = time.perf_counter(); m.logits(m(ids, torch.arange(n)[None], c)[:, -1:]); print(f"{time.perf_counter() - t0:.3f} s")
