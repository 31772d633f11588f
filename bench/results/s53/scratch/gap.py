"""Does what runs between two target passes slow the second? The 1.5B's 1- and 3-row passes after 256 tokens,
back to back, after a 6 ms sleep, 6 ms of busy work, small torch products or the EAGLE head drafting, interleaved; medians of 15."""
import statistics
import time

import torch

from verispec.api import Target

from verispec.api import Speculator
from verispec.sampling import SamplingConfig

target = Target.load("qwen2.5-coder-1.5b", "gguf-q8")
model = target.model
prop = Speculator(method="eagle", target=target, tree="dynamic:2").engine.proposer
ctx = torch.randint(0, 30000, (256,), generator=torch.Generator().manual_seed(0)).tolist()
cache = model.new_cache(400)
x = torch.randn(256, 256)


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


t = {}
with torch.inference_mode():
    hidden = model(torch.tensor([ctx]), torch.arange(256)[None], cache)
    prop.prepare(400)
    prop.observe(hidden[0, :253])
    prop.propose(ctx[:254], 2, SamplingConfig(0.0), torch.Generator())
    for r in range(16):
        for rows in (1, 3):
            for gap in ("none", "sleep", "busy", "torch", "eagle"):
                cache.truncate(256)
                if gap == "sleep":
                    time.sleep(0.006)
                elif gap == "busy":
                    busy(0.006)
                elif gap == "torch":       # small torch ops
                    for _ in range(20):
                        x @ x
                elif gap == "eagle":       # the pair's EAGLE head drafting a 2-node dynamic tree
                    prop.cache.truncate(250)
                    prop.known, prop.fed = 253, 250
                    prop.propose(ctx[:254], 2, SamplingConfig(0.0), torch.Generator())
                t0 = time.perf_counter()
                model.logits(model(torch.randint(0, 1000, (1, rows)), torch.arange(256, 256 + rows)[None], cache))
                if r:
                    t.setdefault((rows, gap), []).append(time.perf_counter() - t0)
for (rows, gap), v in t.items():
    print(f"rows {rows} after {gap:5s}: {statistics.median(v) * 1e3:6.1f} ms")
