"""The draft's auto-k prior weight, 4 (shipped) against 8, alternated in one process: greedy development prompts
(speedup of draft k=auto over plain, per prompt), and random-token prompts at T = 1.5 (the report's "never slower"
check), on the default model in bf16.

    python bench/results/s57/scratch/prior_ab.py [N_DEV_PER_CATEGORY] [N_RANDOM] [WEIGHTS, e.g. 4,8,16]
"""
import statistics
import sys
import time

from verispec.api import Speculator
from verispec.autok import AutoK
from verispec.prompts import load_prompts
from verispec.bench import select
from verispec.report import random_prompts

dev = select(load_prompts(["bench/dev_prompts.jsonl"]), int(sys.argv[1]) if len(sys.argv) > 1 else 2)
plain, draft = Speculator(method="plain", dtype="bf16"), Speculator(method="draft", dtype="bf16")
rand = random_prompts(draft.target.tokenizer, int(sys.argv[2]) if len(sys.argv) > 2 else 8, seed=0)
defaults = AutoK.__init__.__defaults__
WEIGHTS = tuple(int(w) for w in (sys.argv[3] if len(sys.argv) > 3 else "4,8").split(","))


def timed(spec, prompt, **kw):
    t0 = time.perf_counter()
    r = spec.generate(prompt, max_new_tokens=64, **kw)
    return time.perf_counter() - t0, r


for name, prompts, kw in (("dev, T=0", dev, {}), ("random, T=1.5", rand, {"temperature": 1.5, "seed": 1})):
    ratios = {w: [] for w in WEIGHTS}
    for p in prompts:
        for weight in WEIGHTS * 2:
            AutoK.__init__.__defaults__ = (weight,) + defaults[1:]
            tp, rp = timed(plain, p.prompt, **kw)
            td, rd = timed(draft, p.prompt, k="auto", **kw)
            if not kw:
                assert rd.token_ids == rp.token_ids
            ratios[weight].append((tp / len(rp.token_ids)) / (td / len(rd.token_ids)))
    for weight, rs in ratios.items():
        print(f"{name}: prior weight {weight}: draft over plain, median {statistics.median(rs):.3f}x "
              f"(of {len(rs)} runs), mean {statistics.fmean(rs):.3f}x")
AutoK.__init__.__defaults__ = defaults
