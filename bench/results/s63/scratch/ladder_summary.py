"""Per-prompt speedups in ladder_ab.sh's runs: median, worst, prompts slower than plain, by category, and the
mean verified nodes a cycle (drafted tokens over cycles that drafted). Usage: python ladder_summary.py OUTDIR"""
import json
import statistics
import sys
from pathlib import Path

for path in sorted(Path(sys.argv[1]).glob("*.json")):
    runs = json.loads(path.read_text())["per_prompt"]
    for m in [k for k in runs[0] if k not in ("id", "category", "plain") and isinstance(runs[0][k], dict)]:
        r = [p[m]["tokens_per_s"] / p["plain"]["tokens_per_s"] for p in runs]
        cats = {c: statistics.median(p[m]["tokens_per_s"] / p["plain"]["tokens_per_s"] for p in runs
                                     if p["category"] == c) for c in sorted({p["category"] for p in runs})}
        drafted = sum(p[m]["drafted_tokens"] for p in runs)
        checked = sum(p[m]["target_passes"] for p in runs)
        print(f"{path.stem:16s} {m:7s} median {statistics.median(r):.2f}x  worst {min(r):.2f}x  "
              f"slower on {sum(x < 1 for x in r):2d}/{len(r)}  drafted/pass {drafted / checked:.2f}  "
              + "  ".join(f"{c} {v:.2f}x" for c, v in cats.items()))
