"""Plain, ngram and EAGLE tok/s (all prompts) of the four runs of scratch/ab.sh: session 54's code against 55's."""
import json
import statistics
import sys

rows = {}
for side in ("old", "new"):
    for rnd in (1, 2):
        d = json.load(open(f"{sys.argv[1]}/ab_{side}_{rnd}.json"))
        for r in d["results"]:
            if r["category"] == "all":
                rows.setdefault((side, r["method"]), []).append(r["tokens_per_s"])
for method in ("plain", "ngram", "eagle"):
    old, new = rows[("old", method)], rows[("new", method)]
    print(f"{method:6s} s54 {' '.join(f'{x:6.1f}' for x in old)} tok/s   s55 {' '.join(f'{x:6.1f}' for x in new)} tok/s"
          f"   s55 / s54 (medians) {statistics.median(new) / statistics.median(old):.3f}")
