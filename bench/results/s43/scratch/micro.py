"""Session 43's kernel-level figures: greedy tokens (`top_tokens`: argmax_rows) against torch's max(-1); silu_mul at
the best instruction set against AVX2; an EAGLE head pass (4-bit, bf16 cache) after 256, 1,000 and 3,000 tokens with
its cache's store of packed tiles and without (`Rows.stores` returning nothing). Medians in us.

    python bench/results/s43/scratch/micro.py
"""
import statistics
import time

import torch

from verispec import kernels
from verispec.api import Target, make_engine
from verispec.model import ops
from verispec.sampling import top_tokens


def t(fn, n=500):
    times = []
    for _ in range(n):
        a = time.perf_counter()
        fn()
        times.append(time.perf_counter() - a)
    return statistics.median(times) * 1e6


torch.set_num_threads(2)
k = kernels.load()
for rows in (1, 9, 16):
    x = torch.randn(rows, 49152)
    print(f"greedy tokens, {rows:2d} rows of 49,152: argmax_rows {t(lambda: top_tokens(x)):6.1f}, "
          f"torch max(-1) {t(lambda: x.max(-1).indices):6.1f}")
x = torch.randn(9, 3072)
for isa in ("avx2", "best"):
    k.set_fp_isa(isa)
    print(f"silu_mul, 9 rows of 1,536, {isa}: {t(lambda: k.silu_mul(x), 2000):.2f}")
k.set_fp_isa(kernels.isa_asked())
target = Target.load(None, "bf16", "cpu")
head = make_engine("eagle", target, tree="auto+ngram").proposer.head
D, stores = head.cfg.hidden_size, ops.Rows.stores
with torch.inference_mode():
    for ctx in (256, 1000, 3000):
        cache = head.new_cache(ctx + 64)
        head(torch.randn(1, ctx, D, dtype=torch.bfloat16), torch.randint(0, 1000, (1, ctx)), torch.arange(ctx)[None],
             cache)
        for m in (1, 4):
            f, toks, pos = torch.randn(1, m, D, dtype=torch.bfloat16), torch.randint(0, 1000, (1, m)), \
                torch.full((1, m), ctx)
            plan = ops.RowPlan(m, torch.ones(m, m, dtype=torch.bool).tril())

            def run():
                head(f, toks, pos, cache, plan)
                cache.truncate(ctx)
            got = {}
            for rnd in range(2):
                for on in ((True, False) if rnd == 0 else (False, True)):
                    ops.Rows.stores = stores if on else (lambda self, pairs: ())
                    got.setdefault(on, []).append(t(run, 200))
            ops.Rows.stores = stores
            print(f"head pass after {ctx:5d} tokens, {m} rows: with the store {min(got[True]):6.0f}, "
                  f"without {min(got[False]):6.0f}")
