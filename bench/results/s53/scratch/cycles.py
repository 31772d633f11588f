"""Per-cycle trace of one generation on the pair: rows verified, what the gate predicted, and the pass's time.
python bench/results/s53/scratch/cycles.py PROMPT_ID [METHOD] [TREE]"""
import json
import sys
import time

from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timed import Timed  # noqa: E402

from verispec import engine as E
from verispec.api import Speculator, Target

pid = sys.argv[1]
method = sys.argv[2] if len(sys.argv) > 2 else "eagle"
tree = sys.argv[3] if len(sys.argv) > 3 else "dynamic+ngram"
prompt = next(json.loads(l)["prompt"] for l in open("bench/results/s15/pair_prompts.jsonl")
              if json.loads(l)["id"] == pid)
target = Target.load("qwen2.5-coder-1.5b", "gguf-q8")
spec = Speculator(method=method, target=target, tree=tree)
log = []
orig_target = spec.engine.target
seq_holder = {}
orig_seq = E.Engine.sequence


def sequence(self, *a, **k):
    s = orig_seq(self, *a, **k)
    seq_holder["s"] = s
    return s


E.Engine.sequence = sequence


def on_pass(tokens, seconds):
    auto = getattr(seq_holder.get("s"), "auto", None)
    pred = (round(auto.mean_accepted, 2), round(auto.cost, 2)) if hasattr(auto, "mean_accepted") else None
    log.append((tokens.shape[1], seconds, pred))


spec.engine.target = Timed(orig_target, on_pass)
for rep in range(2):
    log.clear()
    t0 = time.perf_counter()
    r = spec.generate(prompt, max_new_tokens=64)
    total = time.perf_counter() - t0
st = r.stats
print(f"{pid} {method} {tree}: total {total:.2f}s prefill {st['time_prefill_s']:.2f} draft {st['time_draft_s']:.2f} "
      f"verify {st['time_verify_s']:.2f} passes {st['target_passes']}")
one = sorted(t for n, t, _ in log[1:] if n == 1)
base = one[len(one) // 2] if one else None
print("median 1-row pass", base)
for n, t, pred in log[1:]:
    print(n, f"{t * 1e3:.1f} ms", f"{t / base:.2f}" if base else "", pred)
