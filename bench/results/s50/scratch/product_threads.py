"""The float product alone (bf16 weights, three of the default model's shapes) at 1-17 rows with THREADS threads,
row counts interleaved per round: median ms and GFLOP/s (2 FLOP per multiply-add).

    python bench/results/s50/scratch/product_threads.py THREADS
"""
import statistics, time, torch, sys
from verispec import kernels
from verispec.model import ops
torch.set_num_threads(int(sys.argv[1]))
lib = kernels.load()
for name, (N, K) in {"gate-up": (3072, 576), "down": (576, 1536), "lm_head": (49152, 576)}.items():
    w = torch.randn(N, K).to(torch.bfloat16); p = ops._panels(w)
    xs = {M: torch.randn(M, K) for M in (1, 4, 6, 8, 12, 16, 17)}
    ts = {M: [] for M in xs}
    for r in range(20 if name == "lm_head" else 200):
        for M, x in xs.items():
            t0 = time.perf_counter(); lib.linear(x, p, N, None); ts[M].append(time.perf_counter() - t0)
    print(name, " ".join(f"{M}:{statistics.median(ts[M])*1e3:.3f}ms/{2*M*N*K/statistics.median(ts[M])/1e9:.0f}GF" for M in xs))
