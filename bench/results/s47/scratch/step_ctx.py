"""One-token pass (+ logits) time after C cached tokens, for each C given; optionally loop one C for a profiler.

    python bench/results/s47/scratch/step_ctx.py 256,1200,2400 [DTYPE] [--loop SECONDS]
"""
import statistics, sys, time, torch
from verispec.api import Target
from verispec.costs import one_token_pass
torch.set_num_threads(2)
args = [a for a in sys.argv[1:] if not a.startswith("--")]
loop = float(sys.argv[sys.argv.index("--loop") + 1]) if "--loop" in sys.argv else 0
target = Target.load(None, args[1] if len(args) > 1 else "bf16", "cpu")
runs = {c: one_token_pass(target.model, c) for c in map(int, args[0].split(","))}
if loop:
    run = next(iter(runs.values())); run(); t0 = time.time(); n = 0
    while time.time() - t0 < loop:
        run(); n += 1
    print(f"{n} passes in {loop} s: {loop / n * 1e3:.2f} ms"); sys.exit()
times = {c: [] for c in runs}
for _ in range(21):
    for c, run in runs.items():
        t0 = time.perf_counter(); run(); times[c].append(time.perf_counter() - t0)
for c, t in times.items():
    print(f"context {c}: {statistics.median(t[1:]) * 1e3:.2f} ms")
