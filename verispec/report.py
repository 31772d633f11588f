"""`verispec report`: the benchmark as a document, with tables, plots, and every figure as JSON.

One process, methods side by side on each prompt (as `bench` runs them), on this machine:
1. cost: the target's verify cost curve T(n)/T(1) (chains and trees) and each method's draft step cost c;
2. k sweep at temperature 0: measured speedup and MAT for each fixed k and for k = auto, beside the speedup the
   cost model predicts from the measured alpha, c and T(n); the acceptance-length histogram against the
   truncated geometric law; alpha by draft position;
3. grid: each method at k = auto for each temperature (default 0, 0.7, 1.0), by category;
4. adversarial: random-token prompts at temperature 1.5, where drafts are useless; auto must stay >= 0.95x plain;
5. peers: `transformers` generate and prompt lookup on the same prompts at temperature 0, when it is installed.
Output: OUT/report.md, OUT/report.json, OUT/*.png.
"""
from __future__ import annotations

import json
import shlex
import statistics
import random
from dataclasses import replace
from pathlib import Path

from .bench import run_bench, select
from .engine import Engine, GenerationConfig
from .errors import VerispecError
from .files import atomic_file
from .flags import method_names, parse_temperatures
from .prompts import Prompt, load_prompts
from .sampling import SamplingConfig
from .profile import TREE_METHODS, correlation_report, explain, in_situ_cost, predicted_vs_measured

ADVERSARIAL_TEMPERATURE = 1.5


def random_prompts(tokenizer, n: int, length: int = 48, seed: int = 0) -> list[Prompt]:
    """Prompts of uniformly random ordinary tokens: nothing a draft or an n-gram table can predict."""
    rng = random.Random(seed)
    special = set(tokenizer.stop_token_ids)
    vocab = [i for i in range(tokenizer.vocab_size) if i not in special and i > 16]
    return [Prompt(f"random-{i}", "random", tokenizer.decode([rng.choice(vocab) for _ in range(length)]) or "x")
            for i in range(n)]


def _row(results, method, category="all"):
    return next(r for r in results if r["method"] == method and r["category"] == category)


def k_sweep(target, make, methods, ks, prompts, cfg, chat, costs, curve) -> dict:
    """Each method at each fixed k and at auto; measured against predicted speedup."""
    engines = {"plain": (Engine(target.model), 1)}
    for m in methods:
        for k in [*ks, "auto"]:
            engines[f"{m}@{k}"] = (make(m), k)
    results, runs = run_bench(target, engines, prompts, cfg, chat)
    out = {}
    for m in methods:                     # c as generation pays it, pooled over this method's fixed-k runs
        situ = [in_situ_cost([{"plain": r["plain"], m: r[f"{m}@{k}"]} for r in runs], m) for k in ks]
        situ = [c for c in situ if c is not None]
        costs[m] = statistics.median(situ) if situ else costs[m]
    for m in methods:
        rows = []
        for k in [*ks, "auto"]:
            r = _row(results, f"{m}@{k}")
            row = {"k": k, "measured_speedup": r["speedup_vs_plain"], "mat": r["mean_accepted_tokens"],
                   "alpha": r["acceptance_rate"], "tokens_per_s": r["tokens_per_s"],
                   "greedy_match_rate": r["greedy_match_rate"], "predicted_speedup": None, "explanation": None}
            if k != "auto" and m not in TREE_METHODS:      # (a tree's c is per cycle: the chain formula does not apply)
                p = predicted_vs_measured(r, costs[m], curve, k)
                row.update(predicted_speedup=p["predicted_speedup"], explanation=explain(p),
                           acceptance_factor=p["acceptance_factor"], cost_factor=p["cost_factor"])
            rows.append(row)
        fixed = [r for r in rows if r["k"] != "auto"]
        best = max(fixed, key=lambda r: r["measured_speedup"])
        top = f"{m}@{max(ks)}"
        hist = [0] * (max(ks) + 1)
        for run in runs:
            for n, count in enumerate(run[top]["accepted_length_histogram"]):
                hist[n] += count
        alpha_top = _row(results, top)["acceptance_rate"]
        out[m] = {"rows": rows, "best_fixed_k": best["k"], "best_fixed_speedup": best["measured_speedup"],
                  "auto_speedup": rows[-1]["measured_speedup"],
                  "alpha_by_position": _row(results, top)["acceptance_by_position"],
                  "histogram": correlation_report(hist, alpha_top or 0.0, max(ks)) if sum(hist) else None,
                  "histogram_k": max(ks)}
    return {"methods": out, "plain_tokens_per_s": _row(results, "plain")["tokens_per_s"]}


def grid(target, make, methods, temperatures, prompts, cfg, chat, hf_methods, draft=None) -> dict:
    """Each method at k = auto, per temperature and category; `transformers` peers at temperature 0."""
    out = {}
    for t in temperatures:
        engines = {"plain": (Engine(target.model), 1), **{m: (make(m), "auto") for m in methods}}
        tcfg = replace(cfg, k="auto", sampling=SamplingConfig(t))
        extra = None
        if hf_methods and t == 0:
            from .hf_compare import HFRunner
            try:
                extra = HFRunner(target, hf_methods, tcfg, draft)
            except Exception as e:  # a peer that cannot run must not cost the rest of the report
                print(f"transformers comparison skipped: {type(e).__name__}: {e}", flush=True)
        results, _ = run_bench(target, engines, prompts, tcfg, chat, extra)
        out[str(t)] = results
    return out


def adversarial(target, make, methods, n, cfg, chat) -> list[dict]:
    prompts = random_prompts(target.tokenizer, n, seed=cfg.seed)
    engines = {"plain": (Engine(target.model), 1), **{m: (make(m), "auto") for m in methods}}
    acfg = replace(cfg, k="auto", sampling=SamplingConfig(ADVERSARIAL_TEMPERATURE))
    results, _ = run_bench(target, engines, prompts, acfg, chat)
    return [r for r in results if r["category"] == "all"]


def check_report_folder(out: Path, force: bool) -> None:
    """Refuse, before any work, an --out that would replace what a user made: a file, or a folder that is not
    empty, unless it holds an earlier report (its report.json names the command that wrote it) and `force`."""
    if out.exists() and not out.is_dir():
        raise VerispecError(f"{out} is a file: name a folder to write the report in")
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not force:
        raise VerispecError(f"{out} exists: pass --force to replace the report there, or name another folder")
    try:
        command = json.loads((out / "report.json").read_text())["meta"]["command"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        command = None
    if not isinstance(command, str) or not command.startswith("verispec report"):
        raise VerispecError(f"{out} holds no report verispec wrote (report.json): --force replaces only a report "
                            "(delete the folder yourself to reuse the name)")


def cmd_report(args) -> int:
    from .bench import parse_ks
    methods = method_names(args.methods, speculative=True)
    ks = parse_ks(args.k)
    if "auto" in ks:
        raise VerispecError("--k lists the fixed k values to sweep; auto is always added")
    temperatures = parse_temperatures(args.temperatures)
    prompts = select(load_prompts(args.prompts), args.limit)
    out = Path(args.out)
    check_report_folder(out, args.force)
    made = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise VerispecError(f"cannot create {out}: {e}") from None
    try:
        return _report(args, out, ks, methods, temperatures, prompts)
    except BaseException:
        if made and not any(out.iterdir()):     # a failed run leaves no empty folder of its own behind
            out.rmdir()
        raise


def _report(args, out, ks, methods, temperatures, prompts) -> int:
    from .api import Target, make_engine
    from .costs import check_room, cost_curve
    from .theory import monotone_curve
    from .plots import write_plots
    from .profile import draft_cost, tree_costs
    from .report_md import render
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
    model, chat = target.model, not args.no_chat
    make = lambda m: make_engine(m, target, args.draft, args.ngram_max)  # noqa: E731
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, seed=args.seed,
                           stop_token_ids=target.tokenizer.stop_token_ids, k_max=max(ks))

    check_room(model, args.context, max(64 if args.trees else 0, 16, max(ks) + 1))
    first = {m: make(m) for m in methods}  # bad methods and drafts fail here, before any measuring
    print("cost curve ...", flush=True)
    t = cost_curve(model, list(range(1, max(16, max(ks) + 1) + 1)), args.context, args.repeats)
    raw = {n: v / t[1] for n, v in t.items()}
    curve = monotone_curve(raw)           # predictions use the physical (non-decreasing, >= 1) curve
    trees = tree_costs(model, [4, 8, 16, 32, 64], args.context, args.repeats) if args.trees else {}
    ctx = target.tokenizer.prompt_ids(prompts[0].prompt, chat)
    isolated = {m: draft_cost(first[m], ctx + ctx[-8:]) / t[1] for m in methods}
    costs = dict(isolated)                # replaced by the in-situ cost measured in the k sweep
    print("k sweep at temperature 0 ...", flush=True)
    sweep = k_sweep(target, make, methods, ks, prompts, cfg, chat, costs, curve)
    hf = []
    if not args.no_hf:
        try:
            import transformers  # noqa: F401
            hf = ["hf-plain", "hf-ngram"] + (["hf-draft"] if "draft" in methods else [])
        except ImportError:
            print("transformers is not installed: no peer comparison", flush=True)
    print(f"grid over temperatures {temperatures} ...", flush=True)
    by_temperature = grid(target, make, methods, temperatures, prompts, cfg, chat, hf, args.draft)
    adv = []
    if args.adversarial:
        print(f"adversarial: {args.adversarial} random-token prompts at T = {ADVERSARIAL_TEMPERATURE} ...",
              flush=True)
        adv = adversarial(target, make, methods, args.adversarial, cfg, chat)
    meta = {"model": target.folder, "dtype": args.dtype, "device": str(model.device), "ks": ks,
            "temperatures": temperatures, "prompts": len(prompts), "per_category": args.limit,
            "max_new_tokens": args.max_new_tokens, "seed": args.seed, "profile": target.profile().meta,
            "command": "verispec " + shlex.join(args.argv)}
    figures = {"meta": meta, "cost_curve": raw, "tree_curve": trees, "draft_cost": costs,
               "draft_cost_isolated": isolated, "k_sweep": sweep,
               "grid": by_temperature, "adversarial": adv}
    plots = write_plots(figures, out)
    with atomic_file(out / "report.json") as f:
        json.dump(figures, f, indent=1, default=float)
    with atomic_file(out / "report.md") as f:
        f.write(render(figures, plots))
    print(f"report written to {out / 'report.md'} ({len(plots)} plots, figures in report.json)")
    return 0
