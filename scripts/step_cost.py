"""Whole-model pass cost: median ms of a pass over 1, 2, 4, 8, 16, 32 and 64 new rows after a short prompt, logits
included, 2 threads. Usage: python scripts/step_cost.py MODEL DTYPE [prof] [--as-draft]   (e.g. qwen2.5-coder-1.5b
gguf). --as-draft: the model as it drafts (a named draft's reduced output head, `api.draft_head`)."""
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
for n in (1, 2, 4, 8, 16, 32, 64):
    ts = [step(n) for _ in range(5)]
    print(name, dtype, "as draft" if "--as-draft" in sys.argv else "", n, f"{statistics.median(ts)*1000:.1f} ms",
          flush=True)
if "prof" in sys.argv[3:]:
    from torch.profiler import profile
    with profile() as p:
        step(1)
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
