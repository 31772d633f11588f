"""Why `make run` shows the draft idle on the code prompt (issue 15, "never give up on a good draft"): the draft's
auto-k state after each cycle, against a fixed k = 4, on that prompt (bf16, greedy, up to 96 new tokens).
`summary` (session 58): the demo's summary prompt instead, against k = 2 and 4.

    python bench/results/s57/scratch/draft_gate.py [summary]
"""
import sys

from verispec.api import Speculator
from verispec.demo import PROMPTS
from verispec.engine import Sequence

PROMPT = ("Add a docstring and type hints to this function, and return the whole function:\ndef mean(values):\n"
          "    total = 0\n    for v in values:\n        total += v\n    return total / len(values)")
SUMMARY = sys.argv[1:] == ["summary"]
PROMPT = PROMPTS[0] if SUMMARY else PROMPT
spec = Speculator(method="draft", dtype="bf16")
prof = spec.engine.profile
print(f"draft c {prof.draft_cost.get('draft'):.3f} (this machine), prior alpha {prof.alpha.get('draft'):.3f}, "
      f"T(2..4)/T(1) {prof.curve[2]:.2f} {prof.curve[3]:.2f} {prof.curve[4]:.2f}")
trace = []
real = Sequence.finish


def finish(self, step, *a, **kw):
    out = real(self, step, *a, **kw)
    if self.auto is not None:
        trace.append((step.proposal.size, len(out), round(self.auto.alpha, 2)))
    return out


Sequence.finish = finish
for k in ("auto", 2, 4) if SUMMARY else ("auto", 4):
    trace.clear()
    r = spec.generate(PROMPT, max_new_tokens=96, k=k)
    s = r.stats
    print(f"k={k}: {len(r.token_ids)} tokens in {s['target_passes']} passes, drafted {s['drafted_tokens']}, "
          f"accepted {s['accepted_tokens']}")
    if k == "auto":
        print("  cycles (drafted, emitted, alpha after):", trace)
