"""The Markdown page of `verispec report`, rendered from its figures dict (the same one saved as report.json)."""
from __future__ import annotations

NEVER_SLOWER = 0.95     # the bar for k = auto on adversarial input


def _f(x, spec=".2f", none="-"):
    return none if x is None else format(x, spec)


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(str(c) for c in r) + " |" for r in rows]]


def headline(figures: dict) -> list[str]:
    """Per method at k = auto, greedy: overall speedup, MAT, alpha, greedy equality; plus the peers."""
    rows = [r for r in figures["grid"].get("0.0", figures["grid"][next(iter(figures["grid"]))])
            if r["category"] == "all"]
    return _table(["method", "tok/s", "speedup vs plain", "MAT", "alpha", "greedy output = plain"],
                  [[r["method"], _f(r["tokens_per_s"], ".1f"), _f(r["speedup_vs_plain"]) + "x",
                    _f(r["mean_accepted_tokens"]), _f(r["acceptance_rate"]), _f(r["greedy_match_rate"], ".0%")]
                   for r in rows])


def render(figures: dict, plots: list[str]) -> str:
    meta = figures["meta"]
    lines = ["# verispec benchmark report", "",
             f"`{meta['command']}`", "",
             f"Model `{meta['model']}`, {meta['dtype']} on {meta['device']}; {meta['prompts']} prompts "
             f"({meta['per_category']} per category), up to {meta['max_new_tokens']} new tokens each, seed "
             f"{meta['seed']}. Speedups are medians over prompts of per-prompt ratios against plain decoding run "
             "back to back in the same process; MAT and alpha are pooled over all decoding passes.", "",
             "## Headline: k = auto, temperature 0", "", *headline(figures), ""]

    lines += ["## Speedup against k (temperature 0): measured and predicted", "",
              "Predicted = E(alpha, k) / (k c + T(k+1)/T(1)), from the alpha measured at that k, the measured "
              "draft cost c and the measured cost curve.", ""]
    rows = []
    for m, d in figures["k_sweep"]["methods"].items():
        for r in d["rows"]:
            gap = (None if r["predicted_speedup"] in (None, 0) else r["measured_speedup"] / r["predicted_speedup"] - 1)
            rows.append([m, r["k"], _f(r["alpha"]), _f(r["mat"]), _f(r["predicted_speedup"]) + "x"
                         if r["predicted_speedup"] else "-", _f(r["measured_speedup"]) + "x", _f(gap, "+.0%"),
                         r["explanation"] or "-"])
    lines += _table(["method", "k", "alpha", "MAT", "predicted", "measured", "gap", "why (if > 10%)"], rows)
    lines += ["", "The gap splits into an acceptance factor (measured MAT / E(alpha, k): below 1 when acceptances "
              "are correlated or alpha varies between prompts) and a cost factor (predicted / measured cycle "
              "cost: below 1 when overheads outside the cost curve, such as sampling, draft catch-up and "
              "Python, add up).", ""]
    for m, d in figures["k_sweep"]["methods"].items():
        verdict = "matches or beats" if d["auto_speedup"] >= d["best_fixed_speedup"] * 0.97 else "trails"
        lines.append(f"- {m}: k = auto gives {d['auto_speedup']:.2f}x; the best fixed k chosen after the fact "
                     f"(k = {d['best_fixed_k']}) gives {d['best_fixed_speedup']:.2f}x: auto {verdict} it "
                     f"(within 3% counts as matching); c = {figures['draft_cost'][m]:.3f}.")
    lines.append("")

    lines += ["## Correlated acceptances", "",
              "Accepted-length histogram at the largest k against the truncated geometric law that independent "
              "acceptances with the same alpha would give.", ""]
    rows = []
    for m, d in figures["k_sweep"]["methods"].items():
        h = d["histogram"]
        if h:
            rows.append([m, d["histogram_k"], " ".join(f"{x:.2f}" for x in h["observed"]),
                         " ".join(f"{x:.2f}" for x in h["geometric"]), f"{h['total_variation']:.3f}"])
    lines += _table(["method", "k", "observed P(n accepted)", "geometric", "TV"], rows) + [""]
    lines += ["Acceptance by draft position: " + "; ".join(
        f"{m}: " + " ".join(_f(a) for a in d["alpha_by_position"])
        for m, d in figures["k_sweep"]["methods"].items()), ""]

    lines += ["## By category and temperature (k = auto)", ""]
    rows = []
    for t, results in figures["grid"].items():
        for r in results:
            if r["method"] != "plain":
                rows.append([t, r["category"], r["method"], _f(r["tokens_per_s"], ".1f"),
                             _f(r["speedup_vs_plain"]) + "x", _f(r["mean_accepted_tokens"]),
                             _f(r["acceptance_rate"]), _f(r["greedy_match_rate"], ".0%")])
    lines += _table(["T", "category", "method", "tok/s", "speedup", "MAT", "alpha", "greedy = plain"], rows)
    lines += ["", "Rows named hf-* are `transformers` generate on the same checkpoint and dtype (hf-ngram: "
              "prompt_lookup_num_tokens); their greedy column compares their tokens with verispec's plain "
              "decoding.", ""]

    if figures["adversarial"]:
        lines += ["## Never slower: adversarial input", "",
                  "Random-token prompts at temperature 1.5, where drafts are useless; k = auto should fall back "
                  f"to plain decoding and stay at >= {NEVER_SLOWER}x.", ""]
        rows = [[r["method"], _f(r["tokens_per_s"], ".1f"), _f(r["speedup_vs_plain"]) + "x",
                 _f(r["acceptance_rate"]), "yes" if r["method"] == "plain" or r["speedup_vs_plain"] >= NEVER_SLOWER
                 else "NO"] for r in figures["adversarial"]]
        lines += _table(["method", "tok/s", "speedup", "alpha", f">= {NEVER_SLOWER}x"], rows) + [""]

    curve = figures["cost_curve"]
    lines += ["## Cost", "", "T(n)/T(1): " + ", ".join(f"{n}: {curve[n]:.2f}" for n in sorted(curve, key=int)
                                                       if int(n) in (2, 4, 8, 16)), ""]
    if figures.get("tree_curve"):
        lines += ["Trees (nodes: cost): " + ", ".join(f"{n}: {v:.2f}" for n, v in figures["tree_curve"].items()), ""]
    iso = figures.get("draft_cost_isolated", {})
    lines += ["Draft step cost c (per draft token, in target passes) as generation pays it, with the isolated "
              "microbenchmark in brackets: " + ", ".join(f"{m} {c:.3f} ({_f(iso.get(m), '.3f')})"
                                                         for m, c in figures["draft_cost"].items()), ""]
    lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    return "\n".join(lines)
