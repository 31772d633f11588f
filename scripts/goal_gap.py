"""How far the speed goals of issues 3, 4 and 5 are from what this machine's measured costs allow.

Everything comes from files in the repository: the cost profile (`verispec profile`:
verispec/profiles/default-bf16-cpu.json), the shipped heads' measured accuracies, and benchmark results
(bench/results/*.json). Nothing is assumed but the formulas of verispec.theory:

    speedup = MAT / (cost of one cycle in plain decoding steps)

- Issue 3 (distilled draft, >= 2x at T = 0 on general prompts): the smallest per-token acceptance alpha for which
  some chain length k reaches 2x, with the draft's measured cost c and cost curve T(k + 1)/T(1), against the
  alpha measured on general prompts.
- Issue 4 (Medusa, MAT >= 2.5 and >= 1.8x): the best MAT any tree of up to 256 nodes can expect from the heads'
  measured per-depth, per-rank accuracies (`trees.json`), verification free or at the measured tree cost.
- Issue 5 (EAGLE, MAT >= 3 and >= 2.5x): the measured cost of a cycle (MAT / speedup, from a bench run), and the
  MAT that cost would need for 2.5x; and, as for issue 3, the alpha a chain would need.

    python scripts/goal_gap.py
"""
import json
from pathlib import Path

from verispec.autok import CostProfile
from verispec.theory import expected_tokens, speedup
from verispec.tree import tree_from_acceptance

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "verispec" / "profiles" / "default-bf16-cpu.json"
MEDUSA = ROOT / "verispec" / "drafts" / "smollm2-135m-instruct-medusa" / "trees.json"
RESULTS = ROOT / "bench" / "results"


def needed_alpha(goal: float, c: float, curve, k_max: int = 16) -> tuple[float, int]:
    """The smallest alpha (to 0.001) for which some k <= k_max predicts `goal`, and that k."""
    for step in range(1, 1000):
        alpha = step / 1000
        k = max(range(1, k_max + 1), key=lambda k: speedup(alpha, k, c, curve))
        if speedup(alpha, k, c, curve) >= goal:
            return alpha, k
    return 1.0, k_max


def row(path: Path, method: str, category: str) -> dict:
    for r in json.loads(path.read_text())["results"]:
        if r["method"] == method and r["category"] == category:
            return r
    raise KeyError(f"{path.name}: no {method} / {category}")


def main():
    profile = CostProfile.load(PROFILE)
    curve = profile.curve
    print(f"cost profile: {PROFILE.relative_to(ROOT)}; chain T(k+1)/T(1): "
          + ", ".join(f"k={n - 1}: {curve[n]:.2f}" for n in (2, 3, 5, 7, 9) if n in curve)
          + "; tree of N nodes: " + ", ".join(f"N={n}: {v:.2f}" for n, v in sorted(profile.tree_curve.items())))

    print("\nissue 3: distilled draft, goal 2x at T = 0 on general prompts")
    c = profile.draft_cost["draft"]
    alpha, k = needed_alpha(2.0, c, curve)
    general = row(RESULTS / "methods_eagle_t0.json", "draft", "general")
    print(f"  draft cost c = {c:.3f}: 2x needs alpha >= {alpha:.2f} (at k = {k}, MAT {expected_tokens(alpha, k):.2f});"
          f" measured on general prompts: alpha {general['acceptance_rate']:.2f}, MAT "
          f"{general['mean_accepted_tokens']:.2f}, {general['speedup_vs_plain']:.2f}x")
    free, k0 = needed_alpha(2.0, 0.0, curve)
    print(f"  even a draft that cost nothing would need alpha >= {free:.2f} (k = {k0})")

    print("\nissue 4: Medusa, goal MAT >= 2.5 and >= 1.8x at T = 0")
    acceptance = json.loads(MEDUSA.read_text())["acceptance"]
    c = profile.draft_cost.get("medusa", 0.0)
    top1 = ", ".join(f"{a[0]:.2f}" for a in acceptance)
    print(f"  the heads' measured top-1 accuracy by depth: {top1}")
    for n in (4, 8, 16, 32, 64, 256):
        _, expected = tree_from_acceptance(acceptance, n)
        cost = profile.tree_cost(n) + c
        print(f"  best tree of {n:3d} nodes: expected MAT {1 + expected:.2f}; at the measured verify cost {cost:.2f}"
              f" -> {(1 + expected) / cost:.2f}x")

    print("\nissue 5: EAGLE, goal MAT >= 3.0 and >= 2.5x at T = 0")
    for name in ("eagle_static_ngram_t0.json", "eagle_dynamic_ngram_t0.json", "eagle_dynamic_t0.json",
                 "eagle_dynamic8_t0.json",
                 "eagle_dynamic12_t0.json"):
        if not (RESULTS / name).exists():
            continue
        r = row(RESULTS / name, "eagle", "all")
        cycle = r["mean_accepted_tokens"] / r["speedup_vs_plain"]
        print(f"  {name}: MAT {r['mean_accepted_tokens']:.2f}, {r['speedup_vs_plain']:.2f}x -> a cycle costs "
              f"{cycle:.2f} plain steps; 2.5x at that cost needs MAT {2.5 * cycle:.2f}")
    c = profile.draft_cost["eagle"]
    alpha, k = needed_alpha(2.5, c, curve)
    print(f"  as a chain (c = {c:.3f}): 2.5x needs alpha >= {alpha:.2f} (k = {k}); profiled alpha "
          f"{profile.alpha['eagle']:.2f}")


if __name__ == "__main__":
    main()
