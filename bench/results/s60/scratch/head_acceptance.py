"""Held-out acceptance by draft depth of several EAGLE heads on one train-eagle run's held-out sequences (session
60; the target's features read from the store beside the data): the table `train-eagle` writes into a head's card,
for heads trained on other data too.

    python bench/results/s60/scratch/head_acceptance.py DATA MODEL HEAD [HEAD ...]

DATA: the distill-data folder; the held-out split is the run's (up to 60
sequences, train-eagle's defaults). HEAD: head folders.
"""
import sys
from pathlib import Path

import torch

from verispec.model import loader
from verispec.model.eagle import load_eagle
from verispec.train import features as store
from verispec.train.data import load_examples, split_held_out
from verispec.train.eagle import draft_acceptance

data, model, heads = sys.argv[1], sys.argv[2], sys.argv[3:]
torch.set_num_threads(2)
examples = load_examples(data, 256)
_, held = split_held_out(examples, 60, data, None)
target, _, _ = loader.load(model, "bf16", "cpu")
folder = store.store_folder(data, Path(data), store.target_settings(model, "bf16", ()))
[feats] = store.stored_features(target, [held], folder)
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
