"""Target pass times by row count, in situ: plain and EAGLE (dynamic+ngram) generations of one pair prompt,
alternated ROUNDS times in one process.  python bench/results/s53/scratch/insitu.py PROMPT_ID [ROUNDS]"""
import collections
import json
import statistics
import sys

from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timed import Timed  # noqa: E402

from verispec.api import Speculator, Target

pid, rounds = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2
prompt = next(json.loads(l)["prompt"] for l in open("bench/results/s15/pair_prompts.jsonl")
              if json.loads(l)["id"] == pid)
target = Target.load("qwen2.5-coder-1.5b", "gguf-q8")
specs = {m: Speculator(method=m, target=target, tree=None if m == "plain" else "dynamic+ngram")
         for m in ("plain", "eagle")}
times = collections.defaultdict(list)
current = [None]


def on_pass(tokens, seconds):
    if tokens.shape[1] < 20:
        times[(current[0], tokens.shape[1])].append(seconds)


for m, s in specs.items():
    s.engine.target = Timed(s.engine.target, on_pass)
totals = collections.defaultdict(list)
for r in range(rounds):
    for m, s in specs.items():
        current[0] = m
        res = s.generate(prompt, max_new_tokens=64)
        st = res.stats
        totals[m].append((st["time_total_s"] - st["time_prefill_s"], st["time_draft_s"], st["time_verify_s"]))
base = statistics.median(times[("plain", 1)])
for (m, n), v in sorted(times.items()):
    print(f"{m:6s} rows {n:2d}: {len(v):3d} passes, median {statistics.median(v) * 1e3:6.1f} ms = "
          f"{statistics.median(v) / base:4.2f} plain steps")
for m, v in totals.items():
    print(m, "decode s (total, draft, verify):", [tuple(round(x, 2) for x in t) for t in v])
