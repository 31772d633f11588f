"""A head pass of 3 tree rows after 300 cached entries, 2000 times: its time, and cProfile's view of it."""
import cProfile, pstats, time, statistics, torch
from verispec.api import Target, make_engine
from verispec.model.rows import RowPlan
torch.set_num_threads(2)
target = Target.load(None, "bf16", "cpu")
engine = make_engine("eagle", target, tree="auto+ngram")
head = engine.proposer.head
cache = head.new_cache(400)
D = head.cfg.hidden_size
with torch.inference_mode():
    head(torch.randn(1, 300, D).bfloat16(), torch.randint(0, 1000, (1, 300)), torch.arange(300)[None], cache)
    feats, toks = torch.randn(1, 3, D).bfloat16(), torch.randint(0, 1000, (1, 3))
    pos = torch.full((1, 3), 301)
    plan = RowPlan(3, torch.eye(3, dtype=torch.bool))
    def one():
        head(feats, toks, pos, cache, plan); cache.truncate(300)
    for _ in range(200): one()
    ts = []
    for _ in range(2000):
        t0 = time.perf_counter(); one(); ts.append(time.perf_counter() - t0)
    print(f"head pass: median {statistics.median(ts)*1e6:.0f} us")
    pr = cProfile.Profile(); pr.enable()
    for _ in range(2000): one()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)
