"""The tokens a draft's reduced output head covers (`verispec/heads/NAME.json`, read by `api.load_draft`).

    python scripts/head_tokens.py qwen2.5-coder-0.5b ../shared/data/prompts/{code,general,math}.jsonl \
        --size 32768 --out verispec/heads/qwen2.5-coder-0.5b.json

A draft's output head is read once per drafted token: for the Qwen2.5-Coder-0.5B it is 151,936 rows, 145 MB of
its 392 MB read a step. A head over fewer rows drafts the same tokens wherever the target's next token is one of
them. Chosen here: every token of the tokenizer's special range (the stop tokens among them), then the tokens of
the training-split prompts by frequency (the development split, `prompts.is_dev`, is never read), then the
lowest ids (byte-level BPE ids follow merge order, so common pieces come first), up to --size. Prints how much
of the development split's text the chosen tokens cover.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections import Counter
from pathlib import Path

from verispec.api import Target
from verispec.prompts import is_dev, load_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts", nargs="+")
    ap.add_argument("--size", type=int, default=32768)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    tok = Target.load(args.model, "gguf", "cpu").tokenizer
    vocab = tok.vocab_size
    special = sorted(set(tok.stop_token_ids) | {i for t, i in tok.vocab().items() if t.startswith("<|") and
                                                  t.endswith("|>")})
    train, dev = Counter(), Counter()
    for p in load_prompts(args.prompts):
        (dev if is_dev(p.id) else train).update(tok.encode(p.prompt))
    chosen = dict.fromkeys(special)
    chosen.update(dict.fromkeys(t for t, _ in sorted(train.items(), key=lambda kv: (-kv[1], kv[0]))))
    chosen.update(dict.fromkeys(range(vocab)))
    ids = sorted(list(chosen)[:args.size])
    kept = set(ids)
    covered = sum(n for t, n in dev.items() if t in kept) / max(1, sum(dev.values()))
    card = {"model": args.model, "size": len(ids), "vocab": vocab,
            "made_by": "python scripts/head_tokens.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "rule": "special tokens, then training-split prompt tokens by frequency, then lowest ids",
            "dev_text_covered": round(covered, 4), "ids": ids}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(card, separators=(",", ":")) + "\n")
    print(f"{args.out}: {len(ids)} of {vocab} tokens; {len(special)} special; {len(train)} seen in training "
          f"prompts; development-split text covered: {covered:.2%}")


if __name__ == "__main__":
    main()
