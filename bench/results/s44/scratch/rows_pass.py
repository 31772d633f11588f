"""Target passes of R rows (a chain, the tree rows' cost is the same products) after N cached tokens, bf16,
2 threads: median ms of the pass and of its logits. usage: rows_pass.py N R [REPS]"""
import sys, time, statistics, torch
from verispec.api import Target
torch.set_num_threads(2)
n, R = int(sys.argv[1]), int(sys.argv[2])
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 60
t = Target.load("smollm2-135m", "bf16", "cpu", "auto")
m = t.model
cache = m.new_cache(n + 64)
g = torch.Generator().manual_seed(0)
with torch.inference_mode():
    m(torch.randint(0, 49152, (1, n), generator=g), torch.arange(n)[None], cache)
    toks = torch.randint(0, 49152, (1, R), generator=g)
    pos = torch.arange(n, n + R)[None]
    ps, ls = [], []
    for i in range(reps):
        t0 = time.perf_counter(); h = m(toks, pos, cache); t1 = time.perf_counter()
        m.logits(h[:, :1]); t2 = time.perf_counter()
        cache.truncate(n)
        ps.append(t1 - t0); ls.append(t2 - t1)
print(f"N={n} R={R}: pass {statistics.median(ps)*1e3:.2f} ms, logits(1 row) {statistics.median(ls)*1e3:.2f} ms")
