"""Whole-model pass cost: median ms of a pass over 1, 2, 4, 8, 16, 32 and 64 new rows after a short prompt, logits
included, 2 threads. Usage: python scripts/step_cost.py MODEL DTYPE [prof] [--as-draft] [--rows=A-B]   (e.g.
qwen2.5-coder-1.5b gguf). --as-draft: the model as it drafts (a named draft's reduced output head, `api.draft_head`).
--rows=A-B: every row count from A to B instead, in 7 interleaved rounds, each also over one row's median."""
import sys, time, torch
from verispec.api import draft_head
from verispec.model import loader
torch.set_num_threads(2)
name, dtype = sys.argv[1], sys.argv[2]
m, tok, _ = loader.load(name, dtype, head_ids=draft_head(name) if "--as-draft" in sys.argv else None)
ids = tok.prompt_ids("Write a Python function that checks whether a number is prime.")
c = m.new_cache(512)
m.logits(m(torch.tensor([ids]), torch.arange(len(ids))[None], c)[:, -1:])
pos = len(ids)
def step(n):
    global pos
    t0 = time.perf_counter()
    h = m(torch.tensor([[ids[-1]] * n]), torch.arange(pos, pos + n)[None], c)
    m.logits(h)
    dt = time.perf_counter() - t0
    c.truncate(pos)
    return dt
import statistics
span = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--rows=")), None)
if span:                     # every count in rounds, one pass of each per round (the VM drifts): medians, and / 1 row
    lo, hi = map(int, span.split("-"))
    times = {n: [] for n in [1] + list(range(max(lo, 2), hi + 1))}
    for _ in range(7):
        for n in times:
            times[n].append(step(n))
    one = statistics.median(times[1])
    for n, ts in times.items():
        print(name, dtype, n, f"{statistics.median(ts)*1000:.1f} ms", f"{statistics.median(ts) / one:.2f}")
for n in () if span else (1, 2, 4, 8, 16, 32, 64):
    ts = [step(n) for _ in range(5)]
    print(name, dtype, "as draft" if "--as-draft" in sys.argv else "", n, f"{statistics.median(ts)*1000:.1f} ms",
          flush=True)
if "prof" in sys.argv[3:]:
    from torch.profiler import profile
    with profile() as p:
        step(1)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
