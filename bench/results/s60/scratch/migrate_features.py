"""Carry session 59's cached features (one file for shards 68-112, OUT.work/features.pt) into the per-shard store
that `train-eagle` now keeps beside the data (verispec/train/features.py), so that they are not computed again.

python bench/results/s60/scratch/migrate_features.py DATA OLD_FEATURES_PT MODEL DTYPE MAX_TOKENS EVAL_EXAMPLES
"""
import sys
import tempfile
from pathlib import Path

import torch

from verispec.train import features as store
from verispec.train.data import load_examples, split_held_out

data, old, model, dtype, max_tokens, eval_examples = sys.argv[1:7]
saved = torch.load(old, weights_only=False)
s = saved["settings"]
assert (s["model"], s["dtype"], s["max_tokens"], s["eval_examples"]) == (model, dtype, int(max_tokens),
                                                                        int(eval_examples)), s
assert "taps" not in s and isinstance(saved["train"], list), "an EAGLE run's features on the final state only"
with tempfile.TemporaryDirectory() as tmp:          # the shards that run saw: the set its key names
    names = sorted(p.name for p in Path(data).glob("shard-*.pt") if p.name >= "shard-00068.pt")
    assert len(names) == s["shards"] or isinstance(s["shards"], str), (len(names), s["shards"])
    for n in names:
        (Path(tmp) / n).symlink_to(Path(data).resolve() / n)
    train, held = split_held_out(load_examples(tmp, int(max_tokens)), int(eval_examples), tmp)
assert len(train) == len(saved["train"]) and len(held) == len(saved["held"])
folder = store.store_folder(data, Path(data), store.target_settings(model, dtype, ()))
by_shard = {}
for e, f in zip(train + held, saved["train"] + saved["held"]):
    assert tuple(f.shape) == (len(e.tokens) - 1, 1536), (e.id, f.shape, len(e.tokens))
    by_shard.setdefault(e.shard, {})[store.sequence_key(e.tokens)] = f
for shard, feats in by_shard.items():
    with store.atomic_file(folder / shard, "wb") as fh:
        torch.save({**store.read_shard(folder / shard), **feats}, fh)
print(f"{sum(map(len, by_shard.values()))} sequences of {len(by_shard)} shards into {folder}")
