"""Greedy tokens of an exported GGUF draft under llama.cpp against verispec's own draft (fp32), on dev prompts.

    python scripts/gguf_roundtrip.py OUT.gguf [--draft DRAFT] [--prompts bench/dev_prompts.jsonl] [--n 10]
        [--tokens 32,64,128]
"""
from __future__ import annotations

import argparse
import json

from verispec.api import Target, load_draft
from verispec.export.roundtrip import first_divergence, llamacpp_greedy, verispec_greedy


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("gguf")
    p.add_argument("--draft", help="the draft folder it was exported from (default: the shipped draft)")
    p.add_argument("--model", help="the target (default: the default model)")
    p.add_argument("--prompts", default="bench/dev_prompts.jsonl")
    p.add_argument("--n", type=int, default=10, help="prompts (the file's first N)")
    p.add_argument("--tokens", default="32,64,128")
    args = p.parse_args()
    target = Target.load(args.model, "fp32", "cpu")
    draft = load_draft(target, args.draft)
    with open(args.prompts) as f:
        prompts = [target.tokenizer.prompt_ids(json.loads(line)["prompt"]) for line in f][:args.n]
    longest = max(int(t) for t in args.tokens.split(","))
    ours, theirs = verispec_greedy(draft, prompts, longest), llamacpp_greedy(args.gguf, prompts, longest)
    at = [first_divergence(a, b) for a, b in zip(ours, theirs)]
    print("first divergence per prompt:", at)
    for n in map(int, args.tokens.split(",")):
        same = sum(i is None or i >= n for i in at)
        print(f"{n} new tokens: identical on {same} of {len(prompts)} prompts")


if __name__ == "__main__":
    main()
