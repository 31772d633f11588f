"""How much a draft's measured c scatters: the default model's shipped draft, c measured five times in one process
two ways: timed against the target's one-token pass in the same rounds (`profile.draft_cost(per_step=...)`, what
auto k now caches), and timed apart from a separately measured pass (what it cached before). 2 threads.

    python scripts/draft_cost_spread.py
"""
import torch

from verispec.api import Target, load_draft
from verispec.costs import cost_curve, one_token_pass
from verispec.engine import Engine
from verispec.profile import draft_cost
from verispec.proposers.draft_model import DraftModelProposer

torch.set_num_threads(2)
target = Target.load(None, "bf16", "cpu")
draft = load_draft(target)
context = torch.randint(0, target.model.cfg.vocab_size, (256,), generator=torch.Generator().manual_seed(0)).tolist()
step = one_token_pass(target.model, 256)
for _ in range(5):
    rounds = draft_cost(Engine(target.model, DraftModelProposer(draft)), context, repeats=9, per_step=step)
    apart = draft_cost(Engine(target.model, DraftModelProposer(draft)), context, repeats=5) \
        / cost_curve(target.model, [1], 256, 3)[1]
    print(f"c timed in the same rounds {rounds:.3f}   timed apart {apart:.3f}", flush=True)
