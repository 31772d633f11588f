"""Where one plain decoding step of the default model goes on this machine: PyTorch's profiler over 20 steps
(one token after 256 cached ones, bf16), the top operators by own time, and the matrix products' share with the
bandwidth they imply (every weight read once per step) (bench/results/step_profile.txt):

    python scripts/step_profile.py
"""
import time

import torch
from torch.profiler import ProfilerActivity, profile

from verispec.api import Target


def main(context=256, steps=20):
    model = Target.load(None, "bf16", "cpu").model
    cache = model.new_cache(context + 8)
    model(torch.randint(0, 1000, (1, context)), torch.arange(context)[None], cache)

    def step():
        cache.truncate(context)
        model.logits(model(torch.tensor([[5]]), torch.tensor([[context]]), cache))

    for _ in range(5):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    wall = (time.perf_counter() - t0) / steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    table = prof.key_averages()
    print(table.table(sort_by="self_cpu_time_total", row_limit=12))
    linear = sum(e.self_cpu_time_total for e in table if "linear" in e.key) / steps / 1e6     # seconds per step
    profiled = sum(e.self_cpu_time_total for e in table) / steps / 1e6
    weights = sum(2 * m.in_features * m.out_features for m in model.modules() if hasattr(m, "packed"))  # bf16
    print(f"step {wall * 1e3:.1f} ms unprofiled ({profiled * 1e3:.1f} ms profiled); matrix products "
          f"{linear * 1e3:.1f} ms, reading {weights / 1e6:.0f} MB of weights: {weights / linear / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
