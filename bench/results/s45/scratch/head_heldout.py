"""Two EAGLE heads' held-out acceptance by draft depth on the same held-out sequences: those of a train-eagle run's
feature cache (OUT.work/features.pt) and its data folder's held-out split.

    python bench/results/s45/scratch/head_heldout.py DATA WORK HEAD_A HEAD_B
"""
import sys, torch
from verispec.api import Target
from verispec.model.eagle import load_eagle
from verispec.train.data import load_examples, split_held_out
from verispec.train.eagle import draft_acceptance
torch.set_num_threads(2)
MAX_TOKENS = 320
data, work, *heads = sys.argv[1:]
saved = torch.load(f"{work}/features.pt", weights_only=False)
held_f = saved["held"]
_, held = split_held_out(load_examples(data, MAX_TOKENS), 60, data, None)   # train-eagle's defaults
held_t = [e.tokens for e in held]
assert len(held_t) == len(held_f), (len(held_t), len(held_f))
target = Target.load(None, "bf16", "cpu").model
for h in heads:
    head, _ = load_eagle(h, target, torch.float32)
    with torch.no_grad():
        acc = draft_acceptance(head, held_f, held_t, ranks=8)
    print(h)
    for d, row in enumerate(acc, 1):
        print(f"  depth {d}: top-1 {row[0]:.3f} top-2 {sum(row[:2]):.3f} top-4 {sum(row[:4]):.3f} top-8 {sum(row):.3f}")
