"""Why `make run` showed the draft idle on the summary prompt (session 58; the code prompt in session 57; issue
15, "never give up on a good draft"): the draft's auto-k state after each cycle, against fixed k = 2 and 4, on that
prompt (bf16, greedy, up to 96 new tokens).

    python bench/results/s58/scratch/draft_gate.py
"""
from verispec.api import Speculator
from verispec.engine import Sequence

PROMPT = ("Summarize this paragraph in two sentences: The city council met on Tuesday evening to discuss the new "
          "riverside park. Residents asked for more trees, more benches and a playground near the water. The council "
          "agreed to plant fifty trees next spring, to add twenty benches along the river path, and to study the "
          "playground at its next meeting.")
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
for k in ("auto", 2, 4):
    trace.clear()
    r = spec.generate(PROMPT, max_new_tokens=96, k=k)
    s = r.stats
    print(f"k={k}: {len(r.token_ids)} tokens in {s['target_passes']} passes, drafted {s['drafted_tokens']}, "
          f"accepted {s['accepted_tokens']}")
    if k == "auto":
        print("  cycles (drafted, emitted, alpha after):", trace)
