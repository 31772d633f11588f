"""Generation with Python's collector as is against gc.freeze() after loading, alternated in one process, 4 rounds of
8 development prompts x 64 tokens: python bench/results/s49/scratch/gc_freeze_ab.py plain|eagle"""
import gc, json, statistics, sys, time, torch
from verispec.api import Speculator
torch.set_num_threads(2)
method = sys.argv[1]
rows = [json.loads(l) for l in open("bench/dev_prompts.jsonl")]
by = {}
for r in rows: by.setdefault(r["category"], []).append(r["prompt"])
prompts = [p for c in by for p in by[c][:2]]
s = Speculator(method=method, tree="auto+ngram" if method == "eagle" else None)
s.generate(prompts[0], 16)
res = {"plain gc": [], "frozen": []}
for rnd in range(4):
    for mode in ("plain gc", "frozen"):
        gc.unfreeze()
        if mode == "frozen": gc.freeze()
        t0 = time.perf_counter()
        for p in prompts: s.generate(p, 64)
        res[mode].append(time.perf_counter() - t0)
print(method, {k: [round(x, 3) for x in v] for k, v in res.items()}, "ratio", round(statistics.median(res["frozen"]) / statistics.median(res["plain gc"]), 4))
