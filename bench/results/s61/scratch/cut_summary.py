"""Per-prompt draft-tree speedups in cut_ab.sh's runs: median, worst, and how many prompts ran slower than plain,
by side and round, with the draft chain beside it. Usage: python cut_summary.py OUTDIR"""
import json
import statistics
import sys
from pathlib import Path

for path in sorted(Path(sys.argv[1]).glob("*.json")):
    runs = json.loads(path.read_text())["per_prompt"]
    for m in ("draft", "draft-tree"):
        r = [p[m]["tokens_per_s"] / p["plain"]["tokens_per_s"] for p in runs]
        cats = {c: statistics.median(p[m]["tokens_per_s"] / p["plain"]["tokens_per_s"] for p in runs
                                     if p["category"] == c) for c in sorted({p["category"] for p in runs})}
        print(f"{path.stem:6s} {m:10s} median {statistics.median(r):.2f}x  worst {min(r):.2f}x  "
              f"slower than plain on {sum(x < 1 for x in r)}/{len(r)}  "
              + "  ".join(f"{c} {v:.2f}x" for c, v in cats.items()))
