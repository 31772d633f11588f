import torch, time, statistics
from verispec import kernels
from verispec.model import ops
torch.set_num_threads(2)
lib = kernels.load()
g = torch.Generator().manual_seed(0)
H, KV, d, cap = 9, 3, 64, 4096
ks = [(torch.randn(KV, cap, d, generator=g)).to(torch.bfloat16)]
vs = [torch.randn(KV, cap, d, generator=g).to(torch.bfloat16)]
def t(f, n=100):
    f(); ts=[]
    for _ in range(n):
        a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
    return statistics.median(ts)*1e3
for L in (256, 2048):
    for R in (1, 9, 64):
        q = torch.randn(R, H, d, generator=g)
        args = (ks, vs, torch.zeros(R, dtype=torch.long), torch.arange(L + 1, L + R + 1), torch.zeros(R, 0, dtype=torch.long), torch.zeros(R, dtype=torch.long), d ** -0.5, ops.CHUNK)
        a = t(lambda: lib.attention(q, *args)); b = t(lambda: lib.attention(q, *args, pairs=True))
        print(f"L={L} R={R}: fp32 {a:.3f} ms  pairs {b:.3f} ms  ({a/b:.2f}x)")
