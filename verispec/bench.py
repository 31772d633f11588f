"""`verispec bench`: every method over the same prompts, side by side in one process.

Per prompt, the methods run back to back (plain first), so machine noise hits them alike. Reported per category
and overall:
- tokens_per_s: median over prompts of new tokens / wall time (prefill included);
- speedup_vs_plain: median over prompts of the per-prompt ratio method tokens/s / plain tokens/s;
- mean_accepted_tokens, acceptance_rate: pooled over all decoding passes of the category;
- greedy_match_rate: fraction of prompts whose tokens equal plain's exactly (greedy only; None when sampling).
"""
from __future__ import annotations

import hashlib
import json
import platform
import statistics
import sys
from collections import defaultdict

import torch

from .api import TREE_METHODS, Target, draft_weights, make_engine
from .engine import Engine, GenerationConfig
from .errors import VerispecError
from .files import atomic_file
from .prompts import load_prompts
from .sampling import SamplingConfig


def select(prompts, limit):
    """The first `limit` prompts of each category, in file order."""
    seen = defaultdict(int)
    out = []
    for p in prompts:
        if limit is None or seen[p.category] < limit:
            seen[p.category] += 1
            out.append(p)
    return out


def summarise(runs: list[dict], method: str, category: str, greedy: bool) -> dict:
    """Aggregate per-prompt runs (each: method -> stats dict, tokens) into one result row."""
    mine = [r[method] for r in runs]
    passes = sum(s["target_passes"] - 1 for s in mine)
    emitted = sum((s["mean_accepted_tokens"] or 0) * (s["target_passes"] - 1) for s in mine)
    checked = sum(s["checked_tokens"] for s in mine)
    accepted = sum(s["accepted_tokens"] for s in mine)
    depth = max((len(s["acceptance_by_position"]) for s in mine), default=0)
    by_pos = []
    for i in range(depth):
        acc = sum(s["_accepted_by_position"][i] for s in mine if i < len(s["_accepted_by_position"]))
        chk = sum(s["_checked_by_position"][i] for s in mine if i < len(s["_checked_by_position"]))
        by_pos.append(acc / chk if chk else None)
    return {
        "method": method, "category": category, "prompts": len(runs),
        "tokens_per_s": statistics.median(s["tokens_per_s"] for s in mine),
        "speedup_vs_plain": statistics.median(s["tokens_per_s"] / r["plain"]["tokens_per_s"]
                                              for s, r in zip(mine, runs)),
        "mean_accepted_tokens": emitted / passes if passes else None,
        "acceptance_rate": accepted / checked if checked else None,
        "acceptance_by_position": by_pos,
        "greedy_match_rate": (sum(r[method]["_tokens"] == r["plain"]["_tokens"] for r in runs) / len(runs)
                              if greedy else None),
        "new_tokens": sum(s["new_tokens"] for s in mine),
        "lossy": any(s.get("lossy", False) for s in mine),      # typical acceptance: not exact
    }


def run_bench(target: Target, engines: dict[str, tuple[Engine, int]], prompts, cfg: GenerationConfig,
              chat: bool, extra_runner=None, progress: bool = True,
              repeats: int = 1) -> tuple[list[dict], list[dict]]:
    """engines: label -> (engine, k). Every engine runs every prompt, one after the other; with repeats > 1 the
    engines run each prompt `repeats` times, in alternating order (drift on a shared machine then hits all
    alike), and each keeps its median-time run (same seed: same tokens, only the timing differs)."""
    from dataclasses import replace

    from tqdm import tqdm
    tok = target.tokenizer
    warm = tok.prompt_ids("Hello!", chat)
    for engine, k in engines.values():  # first calls pay one-off set-up costs; keep them out of the figures
        engine.generate(warm, GenerationConfig(max_new_tokens=4, k=k, sampling=cfg.sampling))
    runs = []
    for p in tqdm(prompts, desc="bench", unit="prompt", file=sys.stderr, disable=not progress):
        ids = tok.prompt_ids(p.prompt, chat)
        row = {"_id": p.id, "_category": p.category}
        tries = {name: [] for name in engines}
        for rep in range(repeats):
            for name in (list(engines) if rep % 2 == 0 else list(reversed(engines))):
                engine, k = engines[name]
                lossy_ok = engine.proposer is not None and engine.proposer.makes_trees   # typical: trees only
                g = engine.generate(ids, replace(cfg, k=k, acceptance=cfg.acceptance if lossy_ok else "exact"))
                s = g.stats.to_dict()
                s.update(_tokens=g.token_ids, _accepted_by_position=g.stats.accepted_by_position,
                         _checked_by_position=g.stats.checked_by_position)
                tries[name].append(s)
        for name, runs_of_name in tries.items():
            row[name] = sorted(runs_of_name, key=lambda s: s["time_total_s"])[(len(runs_of_name) - 1) // 2]
        if extra_runner is not None:
            row.update(extra_runner(ids, row["plain"]["_tokens"]))
        runs.append(row)
    methods = [m for m in runs[0] if not m.startswith("_")]
    results = []
    for category in ["all"] + sorted({r["_category"] for r in runs} - {"all"}):   # (uncategorized: "all" only)
        subset = [r for r in runs if category == "all" or r["_category"] == category]
        for m in methods:
            row = summarise(subset, m, category, cfg.sampling.greedy)
            row["k"] = engines[m][1] if m in engines and m != "plain" else None
            results.append(row)
    return results, runs


def format_table(results: list[dict]) -> str:
    f = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
    lines = [f"{'category':<10} {'method':<14} {'prompts':>7} {'tok/s':>7} {'speedup':>8} {'MAT':>5} "
             f"{'alpha':>6} {'greedy=':>7}"]
    for r in results:
        method = r["method"] + (" LOSSY" if r.get("lossy") else "")
        lines.append(f"{r['category']:<10} {method:<14} {r['prompts']:>7} {r['tokens_per_s']:>7.1f} "
                     f"{r['speedup_vs_plain']:>7.2f}x {f(r['mean_accepted_tokens'], '5.2f'):>5} "
                     f"{f(r['acceptance_rate'], '6.2f'):>6} {f(r['greedy_match_rate'], '7.0%'):>7}")
    return "\n".join(lines)


def tokens_digest(tokens) -> str | None:
    """16 hex digits of sha256 over a run's token ids: two runs (two machines, two versions) of the same prompt,
    method, dtype and seed produced the same tokens where these are equal (`scripts/compare_runs.py`)."""
    if tokens is None:
        return None
    return hashlib.sha256(",".join(str(int(t)) for t in tokens).encode()).hexdigest()[:16]


def environment(args, target: Target | None = None) -> dict:
    from . import kernels
    extra = {}
    if target is not None and target.model.device.type == "cpu":
        from .fingerprint import fingerprint
        extra["model_fingerprint"] = fingerprint(target.model)
    return {**extra, "cpu": kernels.cpu_model(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "machine": platform.machine(), "processor": platform.processor(), "dtype": args.dtype,
            "device": args.device, "k": getattr(args, "ks", args.k), "temperature": args.temperature, "top_p": args.top_p,
            "top_k": args.top_k, "max_new_tokens": args.max_new_tokens, "seed": args.seed,
            "repeats": getattr(args, "repeats", 1), "acceptance": getattr(args, "acceptance", "exact"),
            "draft_weights": draft_weights(target) if target is not None else None}


def parse_ks(text: str) -> list[int | str]:
    from .flags import parse_k
    items = str(text).split(",")
    if any(not k.strip() for k in items):
        raise VerispecError(f"--k takes an integer, 'auto' or a comma-separated list, got {text!r}")
    return [parse_k(k) for k in items]


def cmd_bench(args) -> int:
    from .flags import check_decoding_flags, method_names
    ks = parse_ks(args.k)
    args.k, args.ks = ks[0], ks
    check_decoding_flags(args)
    if args.repeats < 1:
        raise VerispecError(f"--repeats must be >= 1, got {args.repeats}")
    names = method_names(args.methods)
    methods = ["plain"] + [m for m in names if m != "plain"]
    prompts = select(load_prompts(args.prompts), args.limit)
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
    hf_methods = [m for m in methods if m.startswith("hf-")]
    cpp_methods = [m for m in methods if m.startswith("llamacpp-")]
    engines = {"plain": (Engine(target.model), 1)}
    for m in methods[1:]:
        if m not in hf_methods and m not in cpp_methods:
            for k in ks:
                label = m if len(ks) == 1 else f"{m}@auto" if k == "auto" else f"{m}@k{k}"
                tree = args.tree if m in TREE_METHODS else None
                engines[label] = (make_engine(m, target, args.draft, args.ngram_max, tree), k)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k, k_max=args.k_max, seed=args.seed,
                           acceptance=args.acceptance,
                           sampling=SamplingConfig(args.temperature, args.top_k, args.top_p),
                           stop_token_ids=target.tokenizer.stop_token_ids)
    peers = []
    if hf_methods:
        from .hf_compare import HFRunner
        peers.append(HFRunner(target, hf_methods, cfg, args.draft))
    if cpp_methods:
        from .peers import LlamaCppRunner
        peers.append(LlamaCppRunner(target, cpp_methods, cfg, args.draft))
    extra = (lambda ids, plain: {m: s for peer in peers for m, s in peer(ids, plain).items()}) if peers else None
    results, runs = run_bench(target, engines, prompts, cfg, not args.no_chat, extra, repeats=args.repeats)
    if args.acceptance == "typical":
        print("typical acceptance (LOSSY) for the tree methods; the others decode exactly")
    print(format_table(results))
    if args.json_out:
        per_prompt = [{"id": r["_id"], "category": r["_category"],
                       **{m: {**{k: v for k, v in s.items() if not k.startswith("_")},
                              "tokens_sha256": tokens_digest(s.get("_tokens"))}
                          for m, s in r.items() if not m.startswith("_")}} for r in runs]
        try:
            with atomic_file(args.json_out) as fh:
                json.dump({"environment": environment(args, target), "results": results, "per_prompt": per_prompt},
                          fh, indent=1)
        except OSError as e:
            raise VerispecError(f"cannot write {args.json_out}: {e}") from None
    return 0
