"""The EAGLE head's cost per cycle c on this machine (one whole static tree over one target pass, timed round by
round, `profile.draft_cost`), for each tree given; and the shipped profile's c beside it. 2 threads.

    python bench/results/s50/scratch/eagle_c.py DTYPE TREE...      (e.g. gguf-q8 auto 4 8)
"""
import sys, torch
from verispec.api import Target, eagle_proposer
from verispec.engine import Engine
from verispec.profile import draft_cost
from verispec.costs import one_token_pass
torch.set_num_threads(2)
dtype = sys.argv[1]
t = Target.load(None, dtype, "cpu")
prof = t.profile()
print("shipped c", prof.draft_cost, "tree curve", {k: round(v, 2) for k, v in prof.tree_curve.items()})
for tree in sys.argv[2:]:
    p = eagle_proposer(t, None, tree)
    ctx = torch.randint(0, t.model.cfg.vocab_size, (256,), generator=torch.Generator().manual_seed(0)).tolist()
    step = one_token_pass(t.model, 256)
    c = draft_cost(Engine(t.model, p), ctx, repeats=15, per_step=step)
    print(f"{dtype} tree {tree}: {p.tree.size} nodes depth {p.tree.depth} widths {p.tree.widths}  c per cycle {c:.3f}")
