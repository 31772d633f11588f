import sys, time, torch
from verispec import kernels
from verispec.model import ops
from verispec.model.kv_cache import KVCache
torch.set_num_threads(2)
n = 3000
cache = KVCache(1, 1, 3, n, 64, torch.bfloat16, torch.device("cpu"))
rows = ops.Rows.plan([(cache, 0, n, None)])
ks, vs = rows.caches(0)
args = (torch.randn(n, 960), torch.randn(n, 32), torch.randn(n, 32), ks, vs, rows.seq, rows.slot, rows.ctx,
        rows.extra, rows.n_extra, 9, 0.125, ops.CHUNK, False)
lib = kernels.load()
ts = []
for _ in range(int(sys.argv[1])):
    t = time.perf_counter(); lib.attention_step(*args); ts.append(time.perf_counter() - t)
print(sorted(ts)[len(ts)//2] * 1e3, "ms")
