"""Where an EAGLE cycle's time goes on one pair prompt: draft (plan), the target's forward, and finish (logits,
acceptance, cache compaction, the head's observe), per cycle, medians; plain decoding alternated in the same process.
    python bench/results/s53/scratch/finish_cost.py PROMPT_ID [ROUNDS] [TREE]"""
import collections
import json
import statistics
import sys
import time


from verispec import engine as E
from verispec.api import Speculator, Target

pid, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
tree = sys.argv[3] if len(sys.argv) > 3 else "dynamic+ngram"
prompt = next(json.loads(l)["prompt"] for l in open("bench/results/s15/pair_prompts.jsonl")
              if json.loads(l)["id"] == pid)
target = Target.load("qwen2.5-coder-1.5b", "gguf-q8")
specs = {m: Speculator(method=m, target=target, tree=None if m == "plain" else tree) for m in ("plain", "eagle")}
parts = collections.defaultdict(list)
cur = {}
orig_plan, orig_finish = E.Sequence.plan, E.Sequence.finish


def plan(self, k, proposal=None):
    t0 = time.perf_counter()
    step = orig_plan(self, k, proposal)
    cur["rows"] = step.tokens.shape[1]
    cur["plan"] = time.perf_counter() - t0
    cur["t_end_plan"] = time.perf_counter()
    return step


def finish(self, step, hidden, logits=None):
    t0 = time.perf_counter()
    out = orig_finish(self, step, hidden, logits)
    t1 = time.perf_counter()
    key = (cur["m"], cur["rows"])
    parts[key].append((cur["plan"], t0 - cur["t_end_plan"], t1 - t0))
    return out


E.Sequence.plan, E.Sequence.finish = plan, finish
for r in range(rounds):
    for m, s in specs.items():
        cur["m"] = m
        s.generate(prompt, max_new_tokens=64)
base = statistics.median(f + x for _, f, x in parts[("plain", 1)])
print(f"{pid}, tree {tree}: medians in ms (plain step forward+finish {base * 1e3:.1f} ms)")
for (m, n), v in sorted(parts.items()):
    p, f, x = (statistics.median(c) * 1e3 for c in zip(*v))
    print(f"{m:6s} rows {n:2d} x{len(v):3d}: plan {p:5.1f}  forward {f:6.1f}  finish {x:5.1f}  "
          f"cycle {(p + f + x) / base / 1e3:4.2f} plain steps")
