"""Held-out acceptance by draft depth of several EAGLE heads on one train-eagle run's held-out sequences (session 59):
the same table `train-eagle` writes into a head's card, for heads trained on other data too.

    python bench/results/s59/scratch/head_acceptance.py DATA WORK MODEL HEAD [HEAD ...]

DATA: the distill-data folder; WORK: the run's OUT.work (its features.pt); the held-out split is the run's (up to 60
sequences, train-eagle's defaults). HEAD: head folders.
"""
import sys

import torch

from verispec.model import loader
from verispec.model.eagle import load_eagle
from verispec.train.data import load_examples, split_held_out
from verispec.train.eagle import draft_acceptance

data, work, model, heads = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
torch.set_num_threads(2)
examples = load_examples(data, 256)
_, held = split_held_out(examples, 60, data, None)
feats = torch.load(f"{work}/features.pt", weights_only=False)["held"]
target, _, _ = loader.load(model, "bf16", "cpu")
tokens = [e.tokens for e in held]
print(f"{len(held)} held-out sequences, {sum(len(f) for f in feats)} positions")
for folder in heads:
    head, _ = load_eagle(folder, target, torch.float32)
    head.eval()
    with torch.no_grad():
        acc = draft_acceptance(head, feats, tokens, ranks=8)
    print(folder)
    for d, row in enumerate(acc, 1):         # (row[r]: the rank-r choice hit; top-n sums the first n)
        print(f"  depth {d}: " + "  ".join(f"top-{n} {sum(row[:n]):.3f}" for n in (1, 2, 4, 8)))
