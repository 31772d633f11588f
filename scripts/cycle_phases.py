"""Where a speculative cycle's time goes: each cycle timed in three phases, grouped by the rows its target pass held
(1 row: a plain step, the gate closed). plan: drafting and laying out the pass; pass: the target's pass; finish:
its logits and the accept rule. Medians in ms, greedy unless --temperature, 64 new tokens, `--k auto`, 2 threads.

    python scripts/cycle_phases.py MODEL DTYPE METHOD [TREE] [--prompts FILE] [--limit N] [--temperature T]
                                   [--draft-weights auto|q4|native]

e.g. `python scripts/cycle_phases.py smollm2-135m bf16a eagle auto+ngram` (the README's development prompts, 4 per
category) or `python scripts/cycle_phases.py qwen2.5-coder-1.5b gguf-q8 eagle dynamic+ngram --prompts code.jsonl`.
"""
from __future__ import annotations

import statistics
import sys
import time

import torch

from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import GenerationConfig
from verispec.errors import VerispecError
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig

from draft_weights_ab import method_parser    # scripts/, beside this file


def main() -> int:
    ap = method_parser(__doc__.strip().splitlines()[4].strip())
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--draft-weights", default="auto")
    args = ap.parse_args()
    torch.set_num_threads(2)
    try:
        target = Target.load(args.model, args.dtype, "cpu", args.draft_weights)
        engine = make_engine(args.method, target, tree=None if args.tree == "none" else args.tree)
    except VerispecError as e:
        print(f"cycle_phases: {e}", file=sys.stderr)
        return 2
    by_rows: dict[int, list[tuple[float, float, float]]] = {}
    for p in select(load_prompts([args.prompts]), args.limit):
        cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(args.temperature, 0, 1.0),
                               stop_token_ids=target.tokenizer.stop_token_ids)
        seq = engine.sequence(target.tokenizer.prompt_ids(p.prompt), cfg)
        seq.prefill(None)
        with torch.inference_mode():
            while not seq.done:
                t0 = time.perf_counter()
                step = seq.plan(seq.draft_length())
                t1 = time.perf_counter()
                hidden = engine.target(*step.inputs(seq.cache))                   # [1, rows, D]
                t2 = time.perf_counter()
                seq.finish(step, hidden)
                t3 = time.perf_counter()
                by_rows.setdefault(step.tokens.shape[1], []).append((t1 - t0, t2 - t1, t3 - t2))
    print(f"{args.model} {args.dtype} {args.method} {args.tree} T={args.temperature} "
          f"draft weights {args.draft_weights}: medians in ms")
    for rows in sorted(by_rows):
        phases = by_rows[rows]
        plan, pas, fin = (statistics.median(c[i] for c in phases) * 1000 for i in range(3))
        print(f"  rows {rows:3d}  cycles {len(phases):4d}  plan {plan:6.2f}  pass {pas:6.2f}  finish {fin:6.2f}  "
              f"cycle {plan + pas + fin:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
