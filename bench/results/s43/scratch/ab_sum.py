"""Sum an A/B's runs: python ab_sum.py OUT_PREFIX ROUNDS -> per side and method total, decoding; ratios; equality."""
import json
import statistics
import sys

prefix, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for side in ("old", "new"):
    for r in range(1, rounds + 1):
        for line in open(f"{prefix}_{side}_{r}.jsonl"):
            d = json.loads(line)
            rows.setdefault((side, d["method"]), []).append(d)
methods = sorted({m for _, m in rows}, key=lambda m: m != "plain")
tokens = {}
for (side, m), ds in rows.items():
    for d in ds:
        tokens.setdefault(d["id"], set()).add(tuple(d["tokens"]))
same = all(len(v) == 1 for v in tokens.values())
print(f"{len(tokens)} prompts x {rounds} rounds per side; output identical across sides, methods and rounds: {same}")
dec = {}
for side in ("old", "new"):
    for m in methods:
        ds = rows[(side, m)]
        tot, pre = sum(d["total"] for d in ds), sum(d["prefill"] for d in ds)
        dec[(side, m)] = ds
        print(f"  {side} {m:6s}: total {tot:6.1f} s, decoding {tot - pre:6.1f} s, prefill {pre:5.1f} s")
for m in methods:
    o, n = rows[("old", m)], rows[("new", m)]
    print(f"  {m}: new / old time, total {sum(d['total'] for d in n) / sum(d['total'] for d in o):.3f}, decoding "
          f"{sum(d['total'] - d['prefill'] for d in n) / sum(d['total'] - d['prefill'] for d in o):.3f}")
spec = methods[1]
for side in ("old", "new"):
    p, s = rows[(side, "plain")], rows[(side, spec)]
    per = [(a["total"] - a["prefill"]) / (b["total"] - b["prefill"]) for a, b in zip(p, s)]
    e2e = [a["total"] / b["total"] for a, b in zip(p, s)]
    print(f"  {spec} over plain, {side}: end to end {sum(d['total'] for d in p) / sum(d['total'] for d in s):.3f}x, "
          f"decoding {sum(d['total'] - d['prefill'] for d in p) / sum(d['total'] - d['prefill'] for d in s):.3f}x, "
          f"median prompt end to end {statistics.median(e2e):.3f}x, decoding {statistics.median(per):.3f}x")
