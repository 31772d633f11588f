"""bf16 attention's store of packed chunks (AMX tiles) on and off, end to end, interleaved in one process: for
every prompt plain decoding and EAGLE auto+ngram, each with the store and without (`ops.Rows.stores` returning
nothing: every pass packs every chunk afresh, as before session 42), the order reversed every other round.
Checks that all four give the same tokens; prints summed times (end to end and decoding alone) and ratios.

    python bench/results/s42/scratch/store_ab.py [--limit N] [--repeats R] [--max-new-tokens N]
"""
import argparse
import statistics

import torch

from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import Engine, GenerationConfig
from verispec.model import ops
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig

ap = argparse.ArgumentParser()
ap.add_argument("--limit", type=int, default=5)
ap.add_argument("--repeats", type=int, default=2)
ap.add_argument("--max-new-tokens", type=int, default=128)
ap.add_argument("--prompts", default="../shared/data/prompts/long.jsonl")
args = ap.parse_args()
torch.set_num_threads(2)
target = Target.load(None, "bf16", "cpu")
engines = {"plain": Engine(target.model), "eagle": make_engine("eagle", target, tree="auto+ngram")}
stores = ops.Rows.stores
runs = [(e, s) for e in engines for s in ("store", "none")]
times = {r: [] for r in runs}
tok = target.tokenizer
for rnd in range(args.repeats):
    for p in select(load_prompts([args.prompts]), args.limit):
        ids, out = tok.prompt_ids(p.prompt), {}
        for e, s in (runs if rnd % 2 == 0 else runs[::-1]):
            ops.Rows.stores = stores if s == "store" else (lambda self, pairs: ())
            cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k="auto", seed=0,
                                   sampling=SamplingConfig(0.0, 0, 1.0), stop_token_ids=tok.stop_token_ids)
            g = engines[e].generate(ids, cfg)
            out[(e, s)] = g.token_ids
            times[(e, s)].append((g.stats.time_total_s, g.stats.time_total_s - g.stats.time_prefill_s,
                                  g.stats.time_prefill_s))
        assert len({tuple(t) for t in out.values()}) == 1, f"{p.id}: outputs differ"
ops.Rows.stores = stores
n = len(times[runs[0]])
print(f"{n // args.repeats} prompts x {args.repeats} rounds, {args.max_new_tokens} new tokens, output identical in all four")
for r in runs:
    tot, dec, pre = (sum(t[i] for t in times[r]) for i in range(3))
    print(f"  {r[0]:5s} {r[1]:5s}: total {tot:6.1f} s, decoding {dec:6.1f} s, prefill {pre:6.1f} s")
for e in engines:
    a, b = times[(e, "none")], times[(e, "store")]
    print(f"  {e}: store / none, total {sum(x[0] for x in b) / sum(x[0] for x in a):.3f}, decoding "
          f"{sum(x[1] for x in b) / sum(x[1] for x in a):.3f}, prefill {sum(x[2] for x in b) / sum(x[2] for x in a):.3f}")
for s in ("none", "store"):
    p, e = times[("plain", s)], times[("eagle", s)]
    print(f"  eagle over plain, {s}: end to end {sum(x[0] for x in p) / sum(x[0] for x in e):.3f}x, decoding "
          f"{sum(x[1] for x in p) / sum(x[1] for x in e):.3f}x, median prompt "
          f"{statistics.median(x[0] / y[0] for x, y in zip(p, e)):.3f}x")
