"""A training run's work folder: cached inputs and checkpoints, each tied to the flags that made it."""
from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

import torch

from ..errors import VerispecError
from ..files import atomic_file, check_new_folder
from .data import SHARDS, shard_name


def start_run(args):
    """The common start of a training command: (training examples, held-out examples, target, tokenizer, work
    folder OUT.work)."""
    from ..model import loader
    from .data import load_examples, split_held_out
    check_new_folder(args.out, replaces_own(args))
    check_made_by(args.data, args.model)
    examples = load_examples(args.data, args.max_tokens)
    train, held = split_held_out(examples, args.eval_examples, args.data, args.max_answers)
    target, tok, _ = loader.load(args.model, args.dtype, "cpu")
    work = work_folder(args.out)
    work.mkdir(parents=True, exist_ok=True)
    return train, held, target, tok, work


def model_name(model) -> str | None:
    """The catalog name a --model value gives (None and "default": the default model's), or None for a path or a
    .gguf file, which this cannot tell apart from another spelling of the same model."""
    from ..model import catalog
    if model in (None, "default"):
        return catalog.DEFAULT
    return model.lower() if isinstance(model, str) and catalog.entry(model) is not None else None


def check_made_by(data: str, model: str | None) -> None:
    """Refuse to train for another named model than the one whose answers `data` holds (its distill-data manifest):
    another model's token ids mean other tokens, and the heads would come out garbage. Only names are compared; a
    path may be relative to another folder, or another copy or conversion of the same model, so it is let through."""
    import json
    try:
        made_by = json.loads((Path(data) / "manifest.json").read_text()).get("model")
    except (OSError, ValueError, AttributeError, RecursionError):
        return                     # no manifest (or a damaged one): `load_examples` reads the shards alone
    made, wanted = model_name(made_by), model_name(model)
    if made and wanted and made != wanted:
        raise VerispecError(f"{data} holds answers of {made_by}, not of {model or 'the default model'}: train with "
                            f"--model {made_by}, or make data with this model (verispec distill-data --model ...)")


@contextlib.contextmanager
def leaves_no_empty_work_folder(out: str):
    """A training command's run: one that fails before its work folder holds anything (a bad --init, say) leaves
    no empty OUT.work of its own behind; one that wrote a checkpoint keeps it, to resume from."""
    work = work_folder(out)
    existed = work.exists()
    try:
        yield
    except BaseException:
        if not existed and work.is_dir() and not any(work.iterdir()):
            work.rmdir()
        raise


def work_folder(out: str) -> Path:
    """OUT.work, beside OUT whatever way OUT is spelt ("heads/", "a/../heads"): never inside it."""
    path = Path(os.path.abspath(out))
    return path.with_name(path.name + ".work")


def replaces_own(args) -> bool:
    """Whether a training run may replace the folder at OUT: --force, or OUT.work is there (OUT is this run's
    earlier output: a run stopped early, resumed, or run again with other steps)."""
    return args.force or work_folder(args.out).is_dir()


def source_settings(args) -> dict:
    """What the training data and the target are: the data folder and which shards it held (a distill-data run
    finished later makes other data), and the target, where --model names one (the default's key is unchanged).
    Shards 0 to n-1 are keyed by n, as before `--shards`; any other set (made with `--shards`) by its names' digest,
    so another set of as many shards is other data."""
    data = Path(args.data).resolve()
    names = sorted(p.name for p in data.glob(SHARDS))
    whole = names == [shard_name(i) for i in range(len(names))]
    settings = {"data": str(data),
                "shards": len(names) if whole else hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]}
    if args.model:
        settings["model"] = str(Path(args.model).resolve()) if Path(args.model).exists() else args.model
    return settings


def data_settings(args) -> dict:
    """The flags that decide what a run trains on: the data, the target and how it read them (part of every
    checkpoint's settings)."""
    return {**source_settings(args), "max_tokens": args.max_tokens, "dtype": args.dtype,
            "max_answers": args.max_answers, "eval_examples": args.eval_examples}


def load_checkpoint(path: Path, settings: dict) -> dict | None:
    if not path.exists():
        return None
    try:
        ckpt = torch.load(path, weights_only=False)
        if not isinstance(ckpt, dict) or not {"settings", "step", "wall_s", "history", "optimizer"} <= set(ckpt):
            raise ValueError("not a checkpoint a training run wrote")
    except Exception as e:         # (a damaged file: torch raises many kinds)
        raise VerispecError(f"cannot read {path}: {e or type(e).__name__}; delete {path.parent} to start "
                            "afresh") from None
    if ckpt.get("settings") != settings:
        raise VerispecError(f"{path} was made with other flags; use them again or delete {path.parent}")
    return ckpt


def save_checkpoint(path: Path, settings: dict, **state) -> None:
    with atomic_file(path, "wb") as f:
        torch.save({"settings": settings, **state}, f)


def resume(ckpt: dict | None, model: torch.nn.Module, opt, key: str) -> tuple[int, float, list]:
    """Restore `model` (saved under `key`) and the optimiser from a checkpoint; return (step, wall seconds,
    history), all zero / empty for a fresh run."""
    if ckpt is None:
        return 0, 0.0, []
    try:
        model.load_state_dict(ckpt[key])
        opt.load_state_dict(ckpt["optimizer"])
    except (KeyError, RuntimeError, ValueError, TypeError) as e:
        raise VerispecError(f"the run's checkpoint does not fit it ({type(e).__name__} {e}); delete the run's "
                            ".work folder to start afresh") from None
    return ckpt["step"], ckpt["wall_s"], ckpt["history"]


def train_in_rounds(step: int, end: int, every: int, wall: float, train, after) -> tuple[int, float]:
    """Train steps [step, end) in rounds that stop at each multiple of `every`: train(start, stop), then
    after(stop, wall) (held-out evaluation and a checkpoint, not counted in the wall time). Returns (step, wall
    seconds of training so far, earlier sessions included)."""
    t = time.perf_counter()
    while step < end:
        stop = min(end, (step // every + 1) * every)
        train(step, stop)
        step = stop
        wall += time.perf_counter() - t
        after(step, wall)
        t = time.perf_counter()
    return step, wall
