"""How far a prompt-lookup copy runs, by the length of the repeated suffix it starts from: the evidence behind
`ngram.SURE` (where "+ngram" trees verify a copy alone).

Decodes every prompt of a file plainly (greedy), then at every position of each output finds the longest
suffix of the context that occurred before (`ngram.longest_match`, with its agreement flag) and counts how many of
the k tokens that followed it equal the tokens plain decoding produced next. Reported per category and bucket of
the match's length n: positions, the share whose first copied token is right, the mean tokens a greedy verifier
would accept, and the same over positions whose earlier occurrences all agreed on the next token.

    python scripts/lookup_yield.py PROMPTS.jsonl [--model NAME] [--dtype DTYPE] [--max-new-tokens 128] [--k 12]
"""
import argparse
import sys
from collections import defaultdict

from verispec.api import Target, make_engine
from verispec.engine import GenerationConfig
from verispec.errors import VerispecError
from verispec.prompts import load_prompts
from verispec.proposers.ngram import longest_match

BUCKETS = ((2, 2), (3, 3), (4, 5), (6, 8), (9, 15), (16, 32))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompts")
    ap.add_argument("--model")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=12)
    args = ap.parse_args()
    try:
        target = Target.load(args.model, args.dtype)
        prompts = load_prompts([args.prompts])
    except VerispecError as e:
        sys.exit(f"lookup_yield.py: {e}")
    plain = make_engine("plain", target)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k=1)
    stats = defaultdict(lambda: [0, 0, 0, 0, 0])     # positions, first right, accepted, agreed positions, their accepted
    for p in prompts:
        ids = target.tokenizer.prompt_ids(p.prompt, True)
        out = plain.generate(ids, cfg).token_ids
        for i in range(len(out) - 1):
            n, chain, agreed = longest_match(ids + out[:i + 1], args.k)
            bucket = next((b for b in BUCKETS if b[0] <= n <= b[1]), None)
            if bucket is None:
                continue
            truth, a = out[i + 1:], 0
            while a < len(chain) and a < len(truth) and chain[a] == truth[a]:
                a += 1
            s = stats[(p.category, bucket)]
            s[0], s[1], s[2] = s[0] + 1, s[1] + (a > 0), s[2] + a
            if agreed:
                s[3], s[4] = s[3] + 1, s[4] + a
    print(f"{'category':12s} {'n':>6s} {'positions':>9s} {'first right':>11s} {'accepted':>8s} {'agreed':>6s} "
          f"{'accepted':>8s}")
    for (category, (lo, hi)), s in sorted(stats.items()):
        agreed = f"{s[4] / s[3]:8.2f}" if s[3] else f"{'-':>8s}"
        print(f"{category:12s} {f'{lo}-{hi}' if hi > lo else str(lo):>6s} {s[0]:9d} {s[1] / s[0]:11.2f} "
              f"{s[2] / s[0]:8.2f} {s[3]:6d} {agreed}")


if __name__ == "__main__":
    main()
