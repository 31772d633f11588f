"""Issue 16's "code prompts" (the development split's code prompts plus the HumanEval-style completions): median
per-prompt speedup over plain (tokens/s, as `bench` reports it), and pooled tokens over pooled time, of each method in a pair bench JSON, at its temperature.
Usage: python code_median.py BENCH_JSON..."""
import json
import statistics
import sys

for path in sys.argv[1:]:
    runs = json.load(open(path))["per_prompt"]
    code = [p for p in runs if p["category"] in ("code", "completion")]
    methods = [m for m in code[0] if isinstance(code[0][m], dict) and m != "plain" and "time_total_s" in code[0][m]]
    for m in methods:
        ratios = [p[m]["tokens_per_s"] / p["plain"]["tokens_per_s"] for p in code if m in p]
        rate = lambda k: sum(p[k]["new_tokens"] for p in code) / sum(p[k]["time_total_s"] for p in code)  # noqa: E731
        pooled = rate(m) / rate("plain")
        print(f"{path} {m}: {len(ratios)} prompts, median per prompt {statistics.median(ratios):.2f}x, "
              f"pooled {pooled:.2f}x")
