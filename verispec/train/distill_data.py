"""`verispec distill-data`: the target answers training-split prompts; its answers become a draft's data.

Each batch of prompts becomes one shard file (written atomically), so an interrupted run resumes where it
stopped: finished shards are skipped, nothing is done twice, nothing is half-written. The prompt order, the
batches and each shard's seed follow from the parameters alone, which `manifest.json` pins: resuming with other
parameters is refused. `--shards A:B` makes only batches A to B-1, the same files the whole run makes, so one run
can be split across machines and the folders merged. Development-split prompts (verispec.prompts.is_dev) are never used.

Shard contents: for each prompt, its id, category, sampling temperature, chat-formatted prompt tokens, the
target's answer tokens, and at every answer position the target's top-K next-token probabilities at temperature 1.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

from ..errors import VerispecError
from ..files import atomic_file
from ..flags import parse_temperatures
from ..prompts import Prompt, is_dev, load_prompts
from .data import SHARDS, shard_name


def _key(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:12], 16)


def is_archive(path: Path) -> bool:
    """Whether `path` is a whole zip archive, as torch.save writes: one cut short, or of other bytes, is not. Only
    its head and its directory at the end are read, whatever its size."""
    import zipfile
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":
                return False
        with zipfile.ZipFile(path) as z:
            return bool(z.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False


def _digest(paths: list[str]) -> str:
    h = hashlib.sha256()
    for path in paths:                                   # (load_prompts read them already: they are readable)
        h.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return h.hexdigest()


def plan(prompts: list[Prompt], per_category: int | None, batch: int, temperatures: list[float]):
    """Deterministic batches of (prompt, temperature): train split only, categories interleaved, each chunk of
    16 batches sorted by length so that a batch pads little."""
    by_cat: dict[str, list[Prompt]] = {}
    for p in sorted((p for p in prompts if not is_dev(p.id)), key=lambda p: _key(p.id)):
        by_cat.setdefault(p.category, []).append(p)
    cats = [v[:per_category] if per_category else v for _, v in sorted(by_cat.items())]
    order = [c[i] for i in range(max(map(len, cats), default=0)) for c in cats if i < len(c)]
    chunk = batch * 16
    batches = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start:start + chunk], key=lambda p: len(p.prompt))
        batches += [part[i:i + batch] for i in range(0, len(part), batch)]
    return [[(p, temperatures[_key("t" + p.id) % len(temperatures)]) for p in b] for b in batches]


def cmd_distill_data(args) -> int:
    from tqdm import tqdm

    from ..api import Target
    from .batch_generate import sample_batch
    temps = parse_temperatures(args.temperatures)
    if args.batch < 1 or args.max_new_tokens < 1 or args.top_k_probs < 1:
        raise VerispecError("--batch, --max-new-tokens, --top-k-probs must be >= 1")
    batches = plan(load_prompts(args.prompts), args.per_category, args.batch, temps)
    if not batches:
        raise VerispecError("no training-split prompts to answer")
    first, last = args.shards or (0, len(batches))
    if first >= len(batches):
        raise VerispecError(f"--shards {first}:{last}: the plan has only {len(batches)} batches "
                            f"(0 to {len(batches) - 1})")
    wanted = range(first, min(last, len(batches)))
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise VerispecError(f"--out {out} is a file, not a folder")
    manifest = {"model": args.model or "default", "dtype": args.dtype, "max_new_tokens": args.max_new_tokens,
                "batch": args.batch, "temperatures": temps, "top_k_probs": args.top_k_probs, "seed": args.seed,
                "per_category": args.per_category, "max_prompt_tokens": args.max_prompt_tokens,
                "prompt_files": [Path(p).name for p in args.prompts], "shards": len(batches),
                "prompts_sha256": _digest(args.prompts)}    # an edited prompt file makes other batches
    if (out / "manifest.json").exists():
        try:
            old = json.loads((out / "manifest.json").read_text())
            if not isinstance(old, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError, RecursionError) as e:
            raise VerispecError(f"cannot read {out / 'manifest.json'}: {e}; delete {out} to start afresh") from None
        if old != manifest:
            diff = sorted(k for k in manifest if old.get(k) != manifest[k])
            raise VerispecError(f"{out} holds data made with other parameters ({', '.join(diff)}); "
                                "use the same parameters to resume, or another --out")
    for path in sorted(out.glob(SHARDS)):      # finished shards are written atomically: anything else is not one
        if not is_archive(path):
            raise VerispecError(f"{path} is not a shard distill-data wrote: delete it, and this run redoes it")
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
    if args.max_prompt_tokens + args.max_new_tokens > target.model.cfg.max_position:
        raise VerispecError(f"--max-prompt-tokens plus --max-new-tokens ({args.max_prompt_tokens} + "
                            f"{args.max_new_tokens}) exceeds the model's context of {target.model.cfg.max_position}")
    if args.top_k_probs > target.model.cfg.vocab_size:
        raise VerispecError(f"--top-k-probs must be at most the vocabulary ({target.model.cfg.vocab_size}), "
                            f"got {args.top_k_probs}")
    if not (out / "manifest.json").exists():       # only once the run can start: a failed one leaves no folder
        with atomic_file(out / "manifest.json") as f:
            json.dump(manifest, f, indent=1)
    tok = target.tokenizer
    todo = [i for i in wanted if not (out / shard_name(i)).exists()]
    total = sum(len(batches[i]) for i in wanted)
    bar = tqdm(total=total, initial=total - sum(len(batches[i]) for i in todo), unit="prompt",
               desc="distill-data", file=sys.stderr)
    for i in todo:
        rows = batches[i]
        ids = [tok.prompt_ids(p.prompt)[-args.max_prompt_tokens:] for p, _ in rows]
        sampled = sample_batch(target.model, ids, [t for _, t in rows], args.max_new_tokens,
                               tok.stop_token_ids, seed=args.seed * 1_000_003 + i, top_k=args.top_k_probs)
        shard = {"ids": [p.id for p, _ in rows], "categories": [p.category for p, _ in rows],
                 "temperatures": [t for _, t in rows], "prompts": ids,
                 "answers": [s.answer for s in sampled], "topk_ids": [s.topk_ids for s in sampled],
                 "topk_probs": [s.topk_probs for s in sampled]}
        with atomic_file(out / shard_name(i), "wb") as f:
            torch.save(shard, f)
        bar.update(len(rows))
        bar.set_postfix(tokens=sum(len(s.answer) for s in sampled))
    bar.close()
    print(f"{out}: shards {first} to {wanted[-1]} of {len(batches)}, {total} prompts")
    return 0
