"""Print a `verispec bench --json` result file as a Markdown table (for the README).

    python scripts/bench_table.py bench/results/dev_bf16_greedy.json
"""
import json
import sys


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main(path):
    data = json.load(open(path))
    env = data["environment"]
    print(f"<!-- {path}: dtype {env['dtype']}, T={env['temperature']}, k={env['k']}, "
          f"max_new_tokens={env['max_new_tokens']}, torch {env['torch']}, {env['threads']} threads -->")
    print("| category | method | prompts | tok/s (median) | speedup vs plain (median) | MAT | alpha | greedy = plain |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in data["results"]:
        print(f"| {r['category']} | {r['method']} | {r['prompts']} | {r['tokens_per_s']:.1f} | "
              f"{r['speedup_vs_plain']:.2f}x | {fmt(r['mean_accepted_tokens'], '.2f')} | "
              f"{fmt(r['acceptance_rate'], '.2f')} | {fmt(r['greedy_match_rate'], '.0%')} |")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
