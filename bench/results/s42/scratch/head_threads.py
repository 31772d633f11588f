"""EAGLE head pass plus its logits on 1 and 2 threads, after CTX context tokens (rows 1 and 3), medians.

    python bench/results/s42/scratch/head_threads.py CTX
"""
import time, torch, sys
from verispec.api import Target, make_engine
torch.set_num_threads(2)
target = Target.load(None, "bf16", "cpu", "auto")
engine = make_engine("eagle", target, tree="auto+ngram")
head = engine.proposer.head
CTX = int(sys.argv[1]); cache = head.new_cache(CTX + 100)
D = head.cfg.hidden_size
with torch.inference_mode():
    f = torch.randn(1, CTX, D, dtype=head.out.dtype)
    toks = torch.randint(0, 1000, (1, CTX))
    head(f, toks, torch.arange(CTX)[None], cache)
    def one(m):
        cache.truncate(CTX)
        out = head(f[:, :m], toks[:, :m], torch.full((1, m), CTX), cache, torch.ones(1, m, CTX + m, dtype=torch.bool))
        return head.logits(out)
    res = {}
    for rnd in range(6):
        for th in (2, 1):
            torch.set_num_threads(th)
            for m in (1, 3):
                for _ in range(20): one(m)
                ts = []
                for _ in range(100):
                    t = time.perf_counter(); one(m); ts.append(time.perf_counter() - t)
                ts.sort(); res.setdefault((th, m), []).append(ts[50])
    torch.set_num_threads(2)
    for k, v in sorted(res.items()):
        v.sort(); print(f"threads {k[0]} rows {k[1]}: {v[len(v)//2]*1e3:.3f} ms (head pass + logits)")
