"""Replay bench/results/s53/tree_cycles.json (tree_sizes_sim.py): tokens per plain step for fixed tree sizes and for sizes
chosen per cycle from the head's confidence. python bench/results/s53/scratch/tree_sizes_replay.py [C] [ROW]
T(1+n): this machine's profile (tree_cost), or 1 + ROW * n if ROW given."""
import json
import sys

from verispec.api import Target

cycles = json.load(open("bench/results/s53/tree_cycles.json"))
c = float(sys.argv[1]) if len(sys.argv) > 1 else 0.11
if len(sys.argv) > 2:
    row = float(sys.argv[2])
    T = lambda n: 1 + row * n                                             # noqa: E731
else:
    prof = Target.load("qwen2.5-coder-1.5b", "gguf-q8").profile()
    T = prof.tree_cost


def accepted(cyc, n):
    """accepted tokens had only the top-n nodes by confidence been verified (node order: breadth-first; the
    top-n by score among them, stable)."""
    order = sorted(range(len(cyc["p"])), key=lambda i: -cyc["p"][i])[:n]
    kept = {i + 1 for i in order}
    a = 0
    for node in cyc["path"]:
        if node not in kept:
            break
        a += 1
    return a


def fixed(n):
    return lambda cyc, b: n


def adaptive(cyc, b, nmax=16):
    ps = sorted(cyc["p"], reverse=True)
    best, arg, s = 1.0, 0, 0.0
    for n in range(1, min(nmax, len(ps)) + 1):
        s += ps[n - 1]
        g = (1 + b * s) / T(n)
        if g > best:
            best, arg = g, n
    return arg


def run(policy, cat=None):
    tok = cost = 0.0
    acc_sum = pred_sum = 4.0  # calibration prior b = 1
    for cyc in cycles:
        if cat and cyc["cat"] != cat:
            continue
        b = acc_sum / pred_sum
        n = policy(cyc, b)
        a = accepted(cyc, n) if n else 0
        tok += 1 + a
        cost += (T(n) if n else 1.0) + c            # the drafting is paid either way (the gate is separate)
        if n:
            ps = sorted(cyc["p"], reverse=True)[:n]
            acc_sum = 0.9 * acc_sum + a
            pred_sum = 0.9 * pred_sum + sum(ps)
    return tok / cost


cats = sorted({c_["cat"] for c_ in cycles})
print(f"c {c}; T(2..9) " + " ".join(f"{T(n):.2f}" for n in range(1, 9)))
print("policy      " + " ".join(f"{k:>10s}" for k in ["all"] + cats))
for name, pol in [*((f"fixed {n}", fixed(n)) for n in (1, 2, 3, 4, 6, 8, 12, 16)), ("adaptive", adaptive),
                  ("adaptive<=8", lambda cy, b: adaptive(cy, b, 8))]:
    print(f"{name:<12s}" + " ".join(f"{run(pol, cat):10.3f}" for cat in [None] + cats))
# calibration: predicted sum p vs accepted, by top-n
for n in (1, 2, 4, 8):
    pr = sum(sum(sorted(cy["p"], reverse=True)[:n]) for cy in cycles)
    ac = sum(accepted(cy, n) for cy in cycles)
    print(f"top-{n}: predicted {pr:.1f} accepted {ac}")


def depths(cyc):
    d = [0]
    for i in range(1, len(cyc["parents"])):
        d.append(d[cyc["parents"][i]] + 1)
    return d[1:]                                   # node i (0-based) -> its depth


def run_early(tau, c0, c_level, dmax=6, cat=None, nmax=16):
    """Draft level by level while the calibrated confidence of the deepest level's best node reaches tau; then
    size the tree per cycle (adaptive) among the drafted nodes. The drafting costs c0 + c_level per head pass."""
    tok = cost = 0.0
    acc_sum = pred_sum = 4.0
    for cyc in cycles:
        if cat and cyc["cat"] != cat:
            continue
        b = acc_sum / pred_sum
        dep = depths(cyc)
        d = 1
        while d < dmax and max((p for p, x in zip(cyc["p"], dep) if x == d), default=0) * b >= tau:
            d += 1
        sub = {"p": [p if x <= d else -1.0 for p, x in zip(cyc["p"], dep)], "path": cyc["path"]}
        ps = sorted((p for p in sub["p"] if p >= 0), reverse=True)
        best, n, s = 1.0, 0, 0.0
        for m in range(1, min(nmax, len(ps)) + 1):
            s += ps[m - 1]
            if (1 + b * s) / T(m) > best:
                best, n = (1 + b * s) / T(m), m
        a = accepted(sub, n) if n else 0
        tok += 1 + a
        cost += (T(n) if n else 1.0) + c0 + c_level * (d - 1)
        if n:
            acc_sum = 0.9 * acc_sum + a
            pred_sum = 0.9 * pred_sum + sum(ps[:n])
    return tok / cost


print("early-stopped drafting, adaptive size (c0, c_level from draft_depth_cost.py)")
c0, cl = (float(a) for a in (sys.argv[3:5] if len(sys.argv) > 4 else ("0.07", "0.06")))
for dmax in (2, 3, 4, 6):
    for tau in (0.0, 0.2, 0.3, 0.4, 0.6):
        print(f"dmax {dmax} tau {tau:.1f}  " + " ".join(f"{run_early(tau, c0, cl, dmax, cat):10.3f}"
                                                    for cat in [None] + cats))
