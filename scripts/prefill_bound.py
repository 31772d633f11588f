"""How far the prefill bounds an end-to-end speedup: from a `verispec bench --json OUT` file, per prompt, the share
of plain decoding's time spent in the prefill (which every method pays alike), the speedup a method would reach
if its decoding cost nothing (1 / that share), and its decoding alone against plain's; then their medians, the
prompts whose bound is below GOAL, and the decoding-only speedup the median prompt would need to reach GOAL.

    python scripts/prefill_bound.py BENCH_JSON [METHOD] [GOAL]      (default eagle, 1.5)
"""
import json
import statistics
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    method = sys.argv[2] if len(sys.argv) > 2 else "eagle"
    goal = float(sys.argv[3]) if len(sys.argv) > 3 else 1.5
    try:
        rows = json.load(open(sys.argv[1]))["per_prompt"]
        runs = [(p["plain"], p[method]) for p in rows]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"prefill_bound: cannot read {sys.argv[1]} ({method}): {e}", file=sys.stderr)
        return 2
    share = [pl["time_prefill_s"] / pl["time_total_s"] for pl, _ in runs]
    decoding = [(pl["time_total_s"] - pl["time_prefill_s"]) / (m["time_total_s"] - m["time_prefill_s"])
                for pl, m in runs]
    s = statistics.median(share)
    need = (1 - s) / (1 / goal - s) if 1 / goal > s else float("inf")
    below = sum(1 / x < goal for x in share)
    print(f"{len(runs)} prompts: prefill {s:.0%} of plain's time (median); bound with free decoding "
          f"{statistics.median(1 / x for x in share):.2f}x (median), below {goal}x on {below}; "
          f"{method}'s decoding alone {statistics.median(decoding):.2f}x plain (median); the median prompt needs "
          f"{need:.2f}x decoding alone for {goal}x end to end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
