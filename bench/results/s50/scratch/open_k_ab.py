"""EAGLE's static tree with the n-gram path (`--tree auto+ngram`, `--k auto`) with its open gate asking for k_max
(main) against asking for the tree's depth (as between commits cda701a and this one), interleaved prompt by prompt
with plain decoding, the order reversed every other round; summed times and speedups end to end. 2 threads.

    python bench/results/s50/scratch/open_k_ab.py DTYPE [ROUNDS]
"""
import json
import sys
import time

import torch

from verispec import autok
from verispec.api import Target, make_engine
from verispec.engine import GenerationConfig

torch.set_num_threads(2)
dtype, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
t = Target.load(None, dtype, "cpu")
prompts = [json.loads(line) for line in open("bench/dev_prompts.jsonl")]
by_cat: dict = {}
for p in prompts:
    by_cat.setdefault(p["category"], []).append(p)
prompts = [p for ps in by_cat.values() for p in ps[:4]]
original = autok.CostProfile.tree_chooser


def depth_only(self, method, tree, expected=None, margin=0.0, open_k=None):
    return original(self, method, tree, expected, margin)


engines = {"plain": make_engine("plain", t), "k_max": make_engine("eagle", t, tree="auto+ngram"),
           "depth": make_engine("eagle", t, tree="auto+ngram")}
total = {name: 0.0 for name in engines}
mat = {name: [0, 0] for name in engines}
for r in range(rounds):
    for p in prompts:
        ids = t.tokenizer.prompt_ids(p["prompt"])
        cfg = GenerationConfig(max_new_tokens=64, k="auto", stop_token_ids=t.tokenizer.stop_token_ids)
        outs = {}
        for name in (list(engines) if r % 2 == 0 else list(engines)[::-1]):
            autok.CostProfile.tree_chooser = depth_only if name == "depth" else original
            t0 = time.perf_counter()
            g = engines[name].generate(ids, cfg)
            total[name] += time.perf_counter() - t0
            outs[name] = g.token_ids
            mat[name][0] += len(g.token_ids); mat[name][1] += g.stats.target_passes
        assert outs["k_max"] == outs["plain"] == outs["depth"], p["id"]
autok.CostProfile.tree_chooser = original
print(f"{dtype}, {len(prompts)} prompts x {rounds} rounds, output identical to plain everywhere")
for name in engines:
    print(f"  {name:6s} {total[name]:6.1f} s  speedup {total['plain'] / total[name]:.3f}x  "
          f"tokens per pass {mat[name][0] / mat[name][1]:.2f}")
