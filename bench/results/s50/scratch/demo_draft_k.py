"""The draft model on `make run`'s first prompt (the summary), 128 new tokens, at k auto, 2 and 4: how many
draft tokens were proposed and accepted. 2 threads.

    python bench/results/s50/scratch/demo_draft_k.py
"""
import torch
from verispec.api import Target, make_engine
from verispec.engine import GenerationConfig
from verispec.demo import PROMPTS
torch.set_num_threads(2)
t = Target.load(None, "bf16", "cpu")
e = make_engine("draft", t)
print("profile c", e.profile.draft_cost.get("draft"), "alpha", e.profile.alpha.get("draft"), {k: round(v, 2) for k, v in list(e.profile.curve.items())[:6]})
ids = t.tokenizer.prompt_ids(PROMPTS[0])
for k in ("auto", 2, 4):
    g = e.generate(ids, GenerationConfig(max_new_tokens=128, k=k, stop_token_ids=t.tokenizer.stop_token_ids))
    s = g.stats
    print(k, "drafted", s.drafted_tokens, "accepted", s.accepted_tokens, "MAT", round(s.mean_accepted_tokens, 2), "tok/s", round(s.tokens_per_s, 1), "prompt", len(ids))
