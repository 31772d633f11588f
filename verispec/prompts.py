"""Prompt files (JSONL: `prompt`, optional `category` and `id`) and the fixed development split.

The development split is chosen by a hash of each prompt's `id`, so it never changes and never depends on file
order. Benchmarks use it; training data (self-distillation) must never include it.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from .errors import VerispecError

DEV_PERCENT = 10


@dataclass(frozen=True)
class Prompt:
    id: str
    category: str
    prompt: str


def is_dev(prompt_id: str) -> bool:
    """True for the ~10% of ids in the development split (stable across runs and machines)."""
    return int(hashlib.sha256(prompt_id.encode()).hexdigest(), 16) % 100 < DEV_PERCENT


def load_prompts(paths: list[str | Path]) -> list[Prompt]:
    """Read JSONL prompt files; a malformed line is reported with its file and line number."""
    prompts = []
    for path in paths:
        path = Path(path)
        try:
            lines = path.read_text(encoding="utf-8").split("\n")  # not splitlines(): prompts may hold U+2028
        except (OSError, UnicodeDecodeError) as e:
            raise VerispecError(f"cannot read prompts file {path}: {e}") from None
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError(f"a JSON {type(row).__name__}, not an object")
                text = row["prompt"]
                if not isinstance(text, str) or not text.strip():
                    raise ValueError("'prompt' must be a non-empty string")
                text.encode("utf-8")          # a "\\ud800" escape: not valid Unicode (UnicodeEncodeError)
                pid, category = row.get("id"), row.get("category")
                if isinstance(category, (list, dict)) or isinstance(pid, (list, dict)):
                    raise ValueError("'id' and 'category' must be text or numbers")
                pid = f"{path.stem}-{n}" if pid is None else str(pid)
                category = "all" if category is None or not str(category).strip() else str(category)
                (pid + category).encode("utf-8")    # (as for the prompt: a lone surrogate is refused here)
            except (ValueError, KeyError, TypeError) as e:
                what = "missing 'prompt' field" if isinstance(e, KeyError) else str(e)
                raise VerispecError(f"{path}:{n}: malformed prompt line ({what})") from None
            prompts.append(Prompt(pid, category, text))
    if not prompts:
        raise VerispecError(f"no prompts in {', '.join(map(str, paths))}")
    return prompts
