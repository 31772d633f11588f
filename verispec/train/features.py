"""The target's features of distill-data sequences, kept beside the shards they came from.

A sequence's features (`answer_features(..., whole=True, taps=taps)`: [n - 1, (len(taps) + 1) D], row j the state
that predicts token j + 1) depend on its tokens and on the target that read them: model, dtype, tapped layers.
They are stored in DATA/features/KEY/ (KEY: those three), one file per shard, each sequence under the digest of
its tokens. So every training run on the data shares them (EAGLE and Medusa heads; from scratch or `--init`;
other steps, learning rates or seeds), and a run on more shards, or on the same ones cut to another
`--max-tokens`, computes only the sequences it has not seen. A shard's file is replaced whole and atomically once
its new sequences are done: an interrupted run loses at most one shard's work. Each sequence is read alone (no
padding beside others), so its features do not depend on which sequences a run happened to compute. Where DATA
cannot be written the store is OUT.work/features/KEY/, this run's own. Deleting DATA/features reclaims the space.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from ..errors import VerispecError
from ..files import atomic_file
from .data import Example
from .medusa import answer_features

UNSHARDED = "unsharded.pt"      # the file of examples that name no shard
FORMAT = 1                      # of the store's files; part of KEY


def target_settings(model: str | None, dtype: str, taps: tuple[int, ...]) -> dict:
    """What reads the sequences, as KEY digests it: the target's resolved folder with its config's and weights'
    sizes and times (new weights at the same path are another target), the dtype and the tapped layers."""
    from ..model import loader
    folder = loader.resolve(model)
    files = sorted(p for p in folder.iterdir() if p.name == "config.json" or p.suffix == ".safetensors")
    return {"format": FORMAT, "model": str(folder.resolve()), "dtype": dtype, "taps": list(taps),
            "files": [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files]}


def store_folder(data: str | Path, work: Path, settings: dict) -> Path:
    """DATA/features/KEY, or WORK/features/KEY where that cannot be written; KEY digests `settings`
    (`target_settings`), which the folder's settings.json spells out."""
    text = json.dumps(settings, sort_keys=True)
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    for root in (Path(data), work):
        folder = root / "features" / key
        if writable(root):
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError:
                continue
            if writable(folder):
                break
    else:
        raise VerispecError(f"cannot write the target's features in {data}/features or {work}/features")
    if not (folder / "settings.json").exists():
        with atomic_file(folder / "settings.json") as f:
            f.write(text + "\n")
    return folder


def writable(folder: str | Path) -> bool:
    return os.access(folder, os.W_OK | os.X_OK)


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
    width = (len(taps) + 1) * target.cfg.hidden_size
    stored = {shard: read_shard(folder / shard) for shard in sorted(by_shard)}

    def have(shard: str, key: str, g: int, i: int) -> bool:          # (a tensor of another shape: made again)
        f = stored[shard].get(key)
        return f is not None and tuple(f.shape) == (len(groups[g][i].tokens) - 1, width)
    missing = {shard: list({key: (g, i) for g, i, key in rows if not have(shard, key, g, i)}.items())
               for shard, rows in by_shard.items()}
    from tqdm import tqdm
    total = sum(len(m) for m in missing.values())
    bar = tqdm(total=total, desc=desc, unit="sequence", file=sys.stderr) if desc and total else None
    for shard in sorted(by_shard):
        if missing[shard]:
            made = answer_features(target, [groups[g][i] for _, (g, i) in missing[shard]], batch=1, whole=True,
                                   taps=taps, on_batch=bar.update if bar else None)   # (one at a time: no padding)
            stored[shard].update((key, f) for (key, _), f in zip(missing[shard], made))
            with atomic_file(folder / shard, "wb") as f:       # (two runs at once: the last write wins, whole)
                torch.save(stored[shard], f)
    if bar:
        bar.close()
    out = [[None] * len(group) for group in groups]
    for shard, rows in by_shard.items():
        for g, i, key in rows:
            out[g][i] = stored[shard][key]
    return out
