"""Split a `verispec bench --json` run by phase: per method and category, the median over prompts of the speedup
end to end (prefill included, as bench reports it) and of decoding alone (new tokens over the time after the
prefill), each against plain decoding of the same prompt in the same run; and the prefill's share of plain
decoding's time. The prefill is the same work for every method, so it bounds what any of them can gain end to end.

    python scripts/phase_split.py bench/results/s30/pair_t0.json [--merge code,completion]

--merge A,B adds a category of the prompts of A and B together. Peers (llamacpp-plain) report no prefill time:
their decoding column is blank.
"""
import json
import statistics
import sys


def decode_rate(s: dict) -> float:
    return s["new_tokens"] / (s["time_total_s"] - s["time_prefill_s"])


def main(path: str, merged: list[str]) -> None:
    try:
        with open(path) as f:
            runs = json.load(f)["per_prompt"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"phase_split.py: cannot read a bench --json file from {path}: {e!r}")
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) for r in runs):
        sys.exit(f"phase_split.py: {path} has no per-prompt results (per_prompt must be a non-empty list)")
    try:
        table(runs, merged)
    except (KeyError, TypeError, ZeroDivisionError, statistics.StatisticsError) as e:
        sys.exit(f"phase_split.py: {path} is not a bench --json file of this verispec: {e!r}")


def table(runs: list, merged: list[str]) -> None:
    methods = [m for r in runs for m in r if m not in ("id", "category", "plain") and isinstance(r[m], dict)]
    methods = list(dict.fromkeys(methods))
    categories = ["all"] + sorted({r["category"] for r in runs}) + (["+".join(merged)] if merged else [])
    print(f"{'method':16s} {'category':20s} {'prompts':>7s} {'end to end':>10s} {'decoding':>9s} "
          f"{'prefill share':>14s}")
    for m in methods:
        for c in categories:
            rows = [r for r in runs if (c == "all" or r["category"] in c.split("+")) and m in r and "plain" in r]
            if not rows:
                continue
            e2e = statistics.median(r[m]["tokens_per_s"] / r["plain"]["tokens_per_s"] for r in rows)
            share = statistics.median(r["plain"]["time_prefill_s"] / r["plain"]["time_total_s"] for r in rows)
            timed = all("time_prefill_s" in r[m] for r in rows)
            dec = (f"{statistics.median(decode_rate(r[m]) / decode_rate(r['plain']) for r in rows):8.2f}x"
                   if timed else "")
            print(f"{m:16s} {c:20s} {len(rows):7d} {e2e:9.2f}x {dec:>9s} {share:14.0%}")


if __name__ == "__main__":
    args = sys.argv[1:]
    merge = []
    if len(args) == 3 and args[1] == "--merge":
        merge, args = args[2].split(","), args[:1]
    if len(args) != 1:
        sys.exit("usage: python scripts/phase_split.py BENCH.json [--merge A,B]")
    main(args[0], merge)
