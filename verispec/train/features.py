"""The target's features of distill-data sequences, kept beside the shards they came from.

A sequence's features (`answer_features(..., whole=True, taps=taps)`: [n - 1, (len(taps) + 1) D], row j the state
that predicts token j + 1) depend on its tokens and on the target that read them: model, dtype, tapped layers.
They are stored in DATA/features/KEY/ (KEY: those three), one file per shard, each sequence under the digest of
its tokens. So every training run on the data shares them (EAGLE and Medusa heads; from scratch or `--init`;
other steps, learning rates or seeds), and a run on more shards, or on the same ones cut to another
`--max-tokens`, computes only the sequences it has not seen. A shard's file is replaced whole and atomically once
its new sequences are done: an interrupted run loses at most one shard's work. Where DATA is not writable the
store is OUT.work/features/KEY/, this run's own.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from ..files import atomic_file
from .data import Example
from .medusa import answer_features

UNSHARDED = "unsharded.pt"      # the file of examples that name no shard


def store_folder(data: str | Path, work: Path, target_settings: dict) -> Path:
    """DATA/features/KEY, or WORK/features/KEY where DATA is read-only; KEY digests `target_settings` (what reads
    the sequences: model, dtype, taps), which the folder's settings.json spells out."""
    text = json.dumps(target_settings, sort_keys=True)
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    root = Path(data) if writable(data) else work
    folder = root / "features" / key
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "settings.json").exists():
        with atomic_file(folder / "settings.json") as f:
            f.write(text + "\n")
    return folder


def writable(folder: str | Path) -> bool:
    return os.access(folder, os.W_OK)


def sequence_key(tokens: torch.Tensor) -> str:
    """[n] int64 -> the digest a sequence's features are stored under."""
    return hashlib.sha256(tokens.to(torch.int64).contiguous().numpy().tobytes()).hexdigest()[:32]


def read_shard(path: Path) -> dict[str, torch.Tensor]:
    """A shard's stored features by sequence digest; {} where there are none, or the file cannot be read (a cache:
    its sequences are computed again and the file replaced)."""
    try:
        saved = torch.load(path, weights_only=True)
    except Exception:                                   # (none yet; or damaged by hand: only a cache)
        return {}
    return saved if isinstance(saved, dict) else {}


def stored_features(target, groups: list[list[Example]], folder: Path, taps: tuple[int, ...] = (),
                    desc: str | None = None) -> list[list[torch.Tensor]]:
    """Per group of examples, per example, its whole-sequence features [n - 1, (len(taps) + 1) D], read from the
    store at `folder` or computed with `target` (and stored); `desc`: a progress bar over those computed."""
    by_shard: dict[str, list[tuple[int, int, str]]] = {}
    for g, group in enumerate(groups):
        for i, e in enumerate(group):
            by_shard.setdefault(e.shard or UNSHARDED, []).append((g, i, sequence_key(e.tokens)))
    stored = {shard: read_shard(folder / shard) for shard in sorted(by_shard)}
    missing = {shard: list({key: (g, i) for g, i, key in rows if key not in stored[shard]}.items())
               for shard, rows in by_shard.items()}
    from tqdm import tqdm
    total = sum(len(m) for m in missing.values())
    bar = tqdm(total=total, desc=desc, unit="sequence", file=sys.stderr) if desc and total else None
    for shard in sorted(by_shard):
        if missing[shard]:
            made = answer_features(target, [groups[g][i] for _, (g, i) in missing[shard]], whole=True, taps=taps,
                                   on_batch=bar.update if bar else None)
            stored[shard].update((key, f) for (key, _), f in zip(missing[shard], made))
            with atomic_file(folder / shard, "wb") as f:
                torch.save(stored[shard], f)
    if bar:
        bar.close()
    out = [[None] * len(group) for group in groups]
    for shard, rows in by_shard.items():
        for g, i, key in rows:
            out[g][i] = stored[shard][key]
    return out
