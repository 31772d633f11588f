"""PNG plots for `verispec report` (matplotlib, headless). Each function takes the report's figures dict."""
from __future__ import annotations

import os
from pathlib import Path


def _plt():
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _save(fig, out: Path, name: str) -> str:
    from .files import atomic_file
    with atomic_file(out / name, "wb") as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return name


def speedup_vs_k(figures: dict, out: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (m, d) in enumerate(figures["k_sweep"]["methods"].items()):
        fixed = [r for r in d["rows"] if r["k"] != "auto"]
        ks = [r["k"] for r in fixed]
        color = f"C{i}"
        ax.plot(ks, [r["measured_speedup"] for r in fixed], "o-", color=color, label=f"{m} measured")
        if all(r["predicted_speedup"] is not None for r in fixed):     # (none for trees: no chain formula)
            ax.plot(ks, [r["predicted_speedup"] for r in fixed], "x--", color=color, label=f"{m} predicted")
        ax.axhline(d["auto_speedup"], color=color, lw=1, ls=":", label=f"{m} k = auto")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(xlabel="k (draft tokens per cycle)", ylabel="speedup over plain decoding",
           title="Speedup against k, temperature 0")
    ax.legend(fontsize=7)
    return _save(fig, out, "speedup_vs_k.png")


def alpha_by_position(figures: dict, out: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for m, d in figures["k_sweep"]["methods"].items():
        pos = [(i + 1, a) for i, a in enumerate(d["alpha_by_position"]) if a is not None]
        if pos:
            ax.plot(*zip(*pos), "o-", label=m)
    ax.set(xlabel="draft position", ylabel="acceptance rate", ylim=(0, 1),
           title="Acceptance by draft position (temperature 0)")
    if ax.lines:
        ax.legend()
    return _save(fig, out, "alpha_by_position.png")


def histograms(figures: dict, out: Path) -> str:
    plt = _plt()
    methods = [(m, d) for m, d in figures["k_sweep"]["methods"].items() if d["histogram"]]
    fig, axes = plt.subplots(1, max(1, len(methods)), figsize=(5 * max(1, len(methods)), 3.6), squeeze=False)
    for ax, (m, d) in zip(axes[0], methods):
        h = d["histogram"]
        n = range(len(h["observed"]))
        ax.bar([x - 0.2 for x in n], h["observed"], width=0.4, label="observed")
        ax.bar([x + 0.2 for x in n], h["geometric"], width=0.4, label="independent (truncated geometric)")
        ax.set(xlabel=f"draft tokens accepted (k = {d['histogram_k']})", ylabel="fraction of cycles",
               title=f"{m}: TV from geometric {h['total_variation']:.2f}")
        ax.legend(fontsize=7)
    return _save(fig, out, "acceptance_histogram.png")


def by_category_temperature(figures: dict, out: Path) -> str:
    plt = _plt()
    temps = list(figures["grid"])
    first = figures["grid"][temps[0]]
    methods = [m for m in dict.fromkeys(r["method"] for r in first) if m != "plain" and not m.startswith("hf-")]
    cats = [c for c in dict.fromkeys(r["category"] for r in first)]
    fig, axes = plt.subplots(1, len(temps), figsize=(4.5 * len(temps), 3.8), squeeze=False, sharey=True)
    width = 0.8 / max(1, len(methods))
    for ax, t in zip(axes[0], temps):
        rows = {(r["method"], r["category"]): r for r in figures["grid"][t]}
        for j, m in enumerate(methods):
            ax.bar([i + j * width for i in range(len(cats))],
                   [rows[(m, c)]["speedup_vs_plain"] for c in cats], width=width, label=m)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks([i + width * (len(methods) - 1) / 2 for i in range(len(cats))], cats, fontsize=8)
        ax.set(title=f"temperature {t}", ylabel="speedup (k = auto)")
    axes[0][0].legend(fontsize=8)
    return _save(fig, out, "speedup_by_category.png")


def cost_curve(figures: dict, out: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    curve = {int(n): v for n, v in figures["cost_curve"].items()}
    ax.plot(list(curve), list(curve.values()), "o-", label="chain of n tokens")
    trees = {int(n) + 1: v for n, v in figures.get("tree_curve", {}).items()}
    if trees:
        ax.plot(list(trees), list(trees.values()), "s--", label="token tree of n tokens")
    ax.set(xlabel="tokens verified in one pass (n)", ylabel="T(n) / T(1)", title="Verify cost curve")
    ax.legend()
    return _save(fig, out, "cost_curve.png")


def write_plots(figures: dict, out: Path) -> list[str]:
    """Draw every plot into `out`; returns the file names."""
    return [f(figures, out) for f in (speedup_vs_k, alpha_by_position, histograms, by_category_temperature,
                                      cost_curve)]
