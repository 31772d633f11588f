"""ms per one-row pass + logits after C cached tokens (default model, bf16), median of N: python step_time.py C N"""
import statistics, sys, time, torch
from verispec.api import Target
from verispec.costs import primed_cache
torch.set_num_threads(2)
C, N = int(sys.argv[1]), int(sys.argv[2])
model = Target.load(None, "bf16", "cpu").model
cache = primed_cache(model, C, 4, torch.Generator().manual_seed(0))
ts = []
for i in range(N):
    with torch.inference_mode():
        cache.truncate(C); t0 = time.perf_counter()
        model.logits(model(torch.randint(0, 1000, (1, 1)), torch.tensor([[C]]), cache))
        ts.append(time.perf_counter() - t0)
print(f"C={C}: one-row step {statistics.median(ts[5:])*1e3:.2f} ms")
