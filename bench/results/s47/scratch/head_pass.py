"""Time the EAGLE head's pieces after C cached positions: a head pass of m rows, its logits, topk.

    python bench/results/s47/scratch/head_pass.py C
"""
import statistics, sys, time, torch
import verispec.api as a
from verispec.model.eagle import load_eagle
torch.set_num_threads(2)
C = int(sys.argv[1])
t = a.Target.load(None, "bf16", "cpu")
head, cfg = load_eagle(a.default_draft(t, a.DEFAULT_EAGLE, "eagle"), t.model, a.heads_dtype(t))
head = a.cheaper(t, head, heads=True)
D = t.model.cfg.hidden_size
cache = head.new_cache(C + 64) if hasattr(head, "new_cache") else head.decoder.new_cache(C + 64)
with torch.inference_mode():
    head(torch.randn(1, C, D), torch.randint(0, 1000, (1, C)), torch.arange(C)[None], cache)
def timeit(fn, n=200):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3
for m in (1, 2, 4, 8):
    f, tok, pos = torch.randn(1, m, D), torch.randint(0, 1000, (1, m)), torch.full((1, m), C)
    def run():
        with torch.inference_mode():
            cache.truncate(C); head(f, tok, pos, cache)
    def lg():
        with torch.inference_mode():
            head.logits(f[0])
    print(f"m={m}: head pass {timeit(run):.3f} ms, logits {timeit(lg):.3f} ms")
if "--profile" in sys.argv:
    import cProfile, pstats
    m = 2
    f, tok, pos = torch.randn(1, m, D), torch.randint(0, 1000, (1, m)), torch.full((1, m), C)
    def run():
        with torch.inference_mode():
            cache.truncate(C); head(f, tok, pos, cache)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(1000): run()
    pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(25)
