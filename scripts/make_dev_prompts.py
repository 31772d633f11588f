"""Write bench/dev_prompts.jsonl: a fixed benchmark subset of the development split (never trained on).

Categories: general, code, math (first N dev prompts of each, in file order), and quote: dev prompts from general
and code whose answer should repeat their input (fix / rewrite / translate / summarise a given text), where
prompt lookup shines. Run: python scripts/make_dev_prompts.py [--per-category 15]
"""
import argparse
import json
import re
from pathlib import Path

from verispec.files import atomic_file
from verispec.prompts import is_dev, load_prompts

QUOTE = re.compile(r"\b(summari[sz]e|rewrite|paraphrase|rephrase|edit|correct|proofread|fix|refactor|modify|"
                   r"translate|change)\b", re.I)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=str(Path(__file__).resolve().parents[2] / "shared/data/prompts"))
    ap.add_argument("--per-category", type=int, default=15)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "bench/dev_prompts.jsonl"))
    args = ap.parse_args()
    chosen = {"general": [], "code": [], "math": [], "quote": []}
    for name in ("general", "code", "math"):
        for p in load_prompts([Path(args.source) / f"{name}.jsonl"]):
            if not is_dev(p.id):
                continue
            quotes = name != "math" and len(p.prompt) > 150 and QUOTE.search(p.prompt)
            bucket = chosen["quote" if quotes else p.category]
            if len(bucket) < args.per_category:
                bucket.append({"id": p.id, "category": "quote" if quotes else p.category, "prompt": p.prompt})
    with atomic_file(args.out) as f:
        for rows in chosen.values():
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print({k: len(v) for k, v in chosen.items()}, "->", args.out)


if __name__ == "__main__":
    main()
