import sys, time, torch
from verispec.api import Target
torch.set_num_threads(2)
n = int(sys.argv[1])
model = Target.load(None, "bf16", "cpu").model
ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(0))
with torch.inference_mode():
  for i in range(4):
    cache = model.new_cache(n + 8)
    t0 = time.perf_counter()
    model.logits(model(ids, torch.arange(n)[None], cache)[:, -1:])
    print(f"prefill {n}: {time.perf_counter()-t0:.3f} s", flush=True)
