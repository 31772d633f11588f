"""The EAGLE head's dynamic-tree drafting time by (depth, expand), over the 1.5B's one-token pass, in the same
rounds (the head's catch-up of 3 kept tokens included, as after a cycle).  python .../draft_depth_cost.py"""
import statistics
import time

import torch

from verispec.api import Speculator, Target
from verispec.sampling import SamplingConfig

target = Target.load("qwen2.5-coder-1.5b", "gguf-q8")
model = target.model
spec = Speculator(method="eagle", target=target, tree="dynamic:16")
prop = spec.engine.proposer
ctx = torch.randint(0, 30000, (256,), generator=torch.Generator().manual_seed(0)).tolist()
cache = model.new_cache(400)
configs = [(2, 2), (2, 4), (3, 3), (4, 2), (4, 3), (4, 4), (5, 3), (6, 2), (6, 3), (6, 4), (8, 2), (8, 3)]
times = {c: [] for c in configs + ["step"]}
with torch.inference_mode():
    hidden = model(torch.tensor([ctx]), torch.arange(256)[None], cache)
    prop.prepare(400)
    prop.observe(hidden[0, :253])
    prop.propose(ctx[:254], 2, SamplingConfig(0.0), torch.Generator())      # the head reads the context
    for r in range(8):
        for cfg in configs + ["step"]:
            if cfg == "step":
                cache.truncate(256)
                t0 = time.perf_counter()
                model.logits(model(torch.tensor([[5]]), torch.tensor([[256]]), cache))
                times[cfg].append(time.perf_counter() - t0)
                continue
            prop.depth, prop.expand = cfg
            prop.cache.truncate(250)
            prop.known, prop.fed = 253, 250     # 3 new true features to catch up on, as after a cycle
            t0 = time.perf_counter()
            prop.propose(ctx[:254], cfg[0], SamplingConfig(0.0), torch.Generator())
            times[cfg].append(time.perf_counter() - t0)
step = statistics.median(times["step"][1:])
print(f"one-token pass {step * 1e3:.1f} ms")
for cfg in configs:
    t = statistics.median(times[cfg][1:])
    print(f"depth {cfg[0]} expand {cfg[1]}: {t * 1e3:6.1f} ms = c {t / step:.3f}")
