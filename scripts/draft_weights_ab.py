"""A proposer's weights native against q4 (`--draft-weights`), or (`--trees`) tree shapes against each other, end to
end, side by side in one process.

    python scripts/draft_weights_ab.py MODEL DTYPE METHOD [TREE] [--prompts FILE] [--limit N] [--repeats R]
                                       [--max-new-tokens N] [--trees T1,T2,... | --cutoffs C1,C2,... |
                                       --heads DIR1,DIR2,...] [--per-prompt]

Loads the target once and its proposer twice (native, then requantized to 4 bits), and for every prompt runs
plain decoding and the method with each proposer in turn, greedy, 64 new tokens (`--max-new-tokens`), `--k auto`,
the order reversed every other round (the VM drifts by 15-30% between runs: only runs interleaved this way show a few
percent). Checks that all give the same tokens, then prints each variant's speedup over plain: summed times, end
to end (prefill included) and decoding alone, and the median of per-prompt ratios. TREE: as `--tree` ("none" for
a chain). --trees: instead, the method with each of these trees (`--draft-weights auto`), TREE unused. Default
prompts: bench/dev_prompts.jsonl, 4 per category (the README's benchmark). --cutoffs: instead, the method (with
TREE) with each of these cutoffs for its grafted lookup paths (`ngram.CUTOFF`, 0: whole paths). --heads: instead,
the method (with TREE) drafting with each of these folders (`--draft`: a draft model, Medusa or EAGLE heads; "shipped":
the default), e.g. a newly trained head against the shipped one. --per-prompt:
each prompt's decoding speedups too (the median of its rounds). 2 threads.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace

import torch

from verispec.api import Target, make_engine
from verispec.engine import Engine, GenerationConfig
from verispec.errors import VerispecError
from verispec.prompts import load_prompts
from verispec.proposers import ngram
from verispec.sampling import SamplingConfig


def method_parser(usage: str) -> argparse.ArgumentParser:
    """MODEL DTYPE METHOD [TREE] [--prompts FILE] [--limit N]: what these scripts run (also scripts/cycle_phases.py)."""
    ap = argparse.ArgumentParser(usage=usage)
    for name in ("model", "dtype", "method"):
        ap.add_argument(name)
    ap.add_argument("tree", nargs="?", default="none", help='as --tree; "none": a chain')
    ap.add_argument("--prompts", default="bench/dev_prompts.jsonl")
    ap.add_argument("--limit", type=int, default=4, help="prompts per category")
    return ap


def main() -> int:
    ap = method_parser(__doc__.strip().splitlines()[3].strip())
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--trees", help="compare these trees (comma-separated) instead of the weights")
    ap.add_argument("--cutoffs", help="compare these lookup-path cutoffs (comma-separated, `ngram.CUTOFF`; 0: "
                    "whole paths) instead of the weights")
    ap.add_argument("--heads", help="compare these proposer folders (comma-separated; \"shipped\": the default) "
                    "instead of the weights")
    ap.add_argument("--per-prompt", action="store_true", help="also print each prompt's decoding speedups")
    args = ap.parse_args()
    torch.set_num_threads(2)
    from verispec.bench import select
    prompts = select(load_prompts([args.prompts]), args.limit)
    try:
        target = Target.load(args.model, args.dtype, "cpu")
        cutoffs = {}                                                # variant -> ngram.CUTOFF while it runs
        tree = None if args.tree == "none" else args.tree           # TREE, where a variant does not name its own
        if args.trees:
            variants = {t: make_engine(args.method, target, tree=t) for t in args.trees.split(",")}
        elif args.heads:
            variants = {h: make_engine(args.method, target, draft=None if h == "shipped" else h, tree=tree)
                        for h in args.heads.split(",")}
        elif args.cutoffs:
            engine = make_engine(args.method, target, tree=tree)
            cutoffs = {f"cutoff {c}": float(c) for c in args.cutoffs.split(",")}
            variants = {name: engine for name in cutoffs}
        else:                                                       # one target, its proposer loaded both ways
            variants = {w: make_engine(args.method, replace(target, draft_weights=w), tree=tree)
                        for w in ("native", "q4")}
    except VerispecError as e:
        print(f"draft_weights_ab: {e}", file=sys.stderr)
        return 2
    tok = target.tokenizer
    engines = {"plain": Engine(target.model), **variants}
    default_cutoff = ngram.CUTOFF
    times = {name: [] for name in engines}                    # (total s, decoding s) per prompt and round
    passes = {name: [0, 0] for name in engines}               # (tokens, passes) of the cycles, all runs
    for r in range(args.repeats):
        for p in prompts:
            ids, out = tok.prompt_ids(p.prompt), {}
            for name in (list(engines) if r % 2 == 0 else list(engines)[::-1]):
                cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k="auto", seed=0,
                                       sampling=SamplingConfig(0.0, 0, 1.0), stop_token_ids=tok.stop_token_ids)
                ngram.CUTOFF = cutoffs.get(name, default_cutoff)
                g = engines[name].generate(ids, cfg)
                out[name] = g.token_ids
                times[name].append((g.stats.time_total_s, g.stats.time_total_s - g.stats.time_prefill_s))
                passes[name][0] += (g.stats.mean_accepted_tokens or 0) * (g.stats.target_passes - 1)   # as bench
                passes[name][1] += g.stats.target_passes - 1                                  # (not the prefill)
            if len({tuple(tokens) for tokens in out.values()}) != 1:
                print(f"{p.id}: the outputs differ", file=sys.stderr)
                return 1
    if args.per_prompt:                                       # decoding alone, each round's ratio per prompt
        n = len(prompts)
        for i, p in enumerate(prompts):
            ratios = {w: [times["plain"][r * n + i][1] / times[w][r * n + i][1] for r in range(args.repeats)]
                      for w in variants}
            print(f"  {p.id}: " + ", ".join(f"{w} {statistics.median(v):.2f}x" for w, v in ratios.items()))
    plain_total, plain_decode = (sum(t[i] for t in times["plain"]) for i in (0, 1))
    print(f"{args.model} {args.dtype} {args.method} {args.trees or args.tree}: {len(prompts)} prompts x "
          f"{args.repeats} rounds, greedy output identical to plain for every variant")
    for w in variants:
        total, decode = (sum(t[i] for t in times[w]) for i in (0, 1))
        per_prompt = statistics.median(a[0] / b[0] for a, b in zip(times["plain"], times[w]))
        print(f"  {w:12s}: end to end {plain_total / total:.3f}x, decoding {plain_decode / decode:.3f}x, "
              f"median per prompt {per_prompt:.3f}x, MAT {passes[w][0] / max(1, passes[w][1]):.2f}  "
              f"(plain {plain_total:.1f} s, {w} {total:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
