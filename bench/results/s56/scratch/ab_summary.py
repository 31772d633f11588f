"""EAGLE over plain on the pair (all 17 prompts, and by category) in each run of an A/B folder, and per side the
median over its runs: python bench/results/s56/scratch/ab_summary.py FOLDER SIDE_A SIDE_B"""
import json
import statistics
import sys
from pathlib import Path

folder, sides = Path(sys.argv[1]), sys.argv[2:4]
for side in sides:
    runs = sorted(folder.glob(f"{side}_*.json"))
    rows = {}
    for run in runs:
        for r in json.loads(run.read_text())["results"]:
            if r["method"] == "eagle":
                rows.setdefault(r["category"], []).append((r["speedup_vs_plain"], r["mean_accepted_tokens"]))
    for cat, vals in rows.items():
        print(f"{side:6s} {cat:10s} " + " ".join(f"{s:.2f}x (MAT {m:.2f})" for s, m in vals)
              + f"   median {statistics.median(s for s, _ in vals):.2f}x")
