"""`verispec profile`: measure what speedup depends on, predict speedup from it, and compare with measurement.

Measured on this machine, for the target in the chosen dtype and device:
- the verify cost curve T(n)/T(1) for chains (n = 1..16) and for token trees of several sizes;
- each method's draft step cost c, relative to one target pass;
- acceptance: alpha overall, by draft position and by category, from runs over a prompt set at fixed k;
- the acceptance-length histogram against the truncated geometric law that independent acceptances give.
Then, per method: predicted speedup E(alpha, k) / (k c + T(k+1)/T(1)) against the measured speedup, with the gap
split into its two factors: acceptance (measured MAT / E(alpha, k): below 1 means acceptances are not
independent, or alpha varies between prompts) and cost (predicted cycle cost / measured cycle cost: below 1 means
overheads the formula does not see). The profile file feeds `--k auto`.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch

from .autok import CostProfile, cost_table, number
from .costs import check_room, cost_curve, one_token_pass, verify_times
from .theory import expected_tokens, monotone_curve, speedup, truncated_geometric


def tree_costs(model, sizes: list[int], context: int = 256, repeats: int = 5) -> dict[int, float]:
    """T(tree of n nodes)/T(1) for breadth-first trees of top-2 choices (n nodes plus the root), each timed in
    the same rounds as the one-token pass it is divided by."""
    return verify_times(model, [1], sizes, context, repeats, relative=True)[1]


def draft_cost(engine, context_ids: list[int], k: int = 4, repeats: int = 15, per_step=None) -> float:
    """Seconds per draft token of the engine's proposer (per whole tree for tree proposers), median over
    repeated proposals at the same point. With `per_step` (a callable: one target pass, `one_token_pass`), each
    round times that pass too, right after the proposal, and the result is the median of the rounds' ratios: c,
    in target passes. (A draft timed apart from the pass it is divided by drifts with the VM: the default model's
    draft measured c 0.092 in one session and 0.126 in the next, and auto k's choice turned on it.)"""
    from .sampling import SamplingConfig
    prop, tree = engine.proposer, engine.static_tree
    prop.prepare(len(context_ids) + max(k, tree.size if tree else 0) + 2)
    g = torch.Generator().manual_seed(0)
    times = []
    for _ in range(repeats + 1):
        prop.propose(context_ids[:-1], 1, SamplingConfig(0.0), g)       # put the proposer one token behind
        if prop.reads_features:                                         # it drafts from the target's features
            prop.observe(torch.zeros(1, engine.target.cfg.hidden_size, dtype=engine.target.dtype,
                                     device=engine.target.device))
        t0 = time.perf_counter()
        prop.propose(context_ids, tree.depth if tree else k, SamplingConfig(0.0), g)
        if tree is not None and engine.target.device.type == "cuda":    # a static tree left on the device: its
            torch.cuda.synchronize(engine.target.device)                 # drafting may still be running
        t = time.perf_counter() - t0
        if per_step is not None:
            t0 = time.perf_counter()
            per_step()
            t /= time.perf_counter() - t0
        times.append(t)
    return statistics.median(times[1:]) / (1 if tree else k)


def in_situ_cost(runs: list[dict], method: str) -> float | None:
    """c as generation pays it: draft seconds per drafted token (per cycle for tree methods) over plain
    decoding's seconds per step, pooled over a benchmark's prompts. Higher than `draft_cost` on CPU: between
    cycles the target's pass evicts the draft's weights from cache, and the draft's catch-up pass after each
    verification is included."""
    per_cycle = method in TREE_METHODS
    drafted = sum(r[method]["target_passes" if per_cycle else "drafted_tokens"] - per_cycle for r in runs)
    steps = sum(r["plain"]["target_passes"] - 1 for r in runs)
    if not drafted or not steps:
        return None
    t_plain = sum(r["plain"]["time_verify_s"] for r in runs) / steps
    return sum(r[method]["time_draft_s"] for r in runs) / drafted / t_plain


TREE_METHODS = ("draft-tree", "medusa")     # c is per cycle (a whole tree), and the chain formula does not apply


def correlation_report(histogram: list[int], alpha: float, k: int) -> dict:
    """Observed accepted-length frequencies against the truncated geometric law with the same alpha."""
    total = sum(histogram)
    observed = [h / total for h in histogram] + [0.0] * (k + 1 - len(histogram))
    expected = truncated_geometric(alpha, k)
    tv = 0.5 * sum(abs(o - e) for o, e in zip(observed, expected))
    full_obs, full_exp = observed[k], expected[k]
    return {"observed": observed, "geometric": expected, "total_variation": tv,
            "all_accepted_observed": full_obs, "all_accepted_geometric": full_exp}


def predicted_vs_measured(row: dict, c: float, curve: dict[int, float], k: int) -> dict:
    """Split the gap between predicted and measured speedup into acceptance and cost factors."""
    alpha = row["acceptance_rate"] or 0.0
    predicted = speedup(alpha, k, c, curve)
    measured = row["speedup_vs_plain"]
    e = expected_tokens(alpha, k)
    mat = row["mean_accepted_tokens"] or 1.0
    acceptance_factor = mat / e
    cost_predicted = k * c + curve.get(k + 1, curve[max(curve)])
    cost_measured = mat / measured if measured else float("inf")
    return {"alpha": alpha, "k": k, "c": c, "predicted_speedup": predicted, "measured_speedup": measured,
            "gap": measured / predicted - 1, "expected_tokens": e, "measured_mat": mat,
            "acceptance_factor": acceptance_factor, "cost_predicted": cost_predicted,
            "cost_measured": cost_measured, "cost_factor": cost_predicted / cost_measured}


def explain(p: dict) -> str:
    if abs(p["gap"]) <= 0.10:
        return "within 10%"
    parts = []
    if abs(p["acceptance_factor"] - 1) > 0.05:
        parts.append(f"acceptance x{p['acceptance_factor']:.2f} (MAT {p['measured_mat']:.2f} vs "
                     f"E = {p['expected_tokens']:.2f}: acceptances not independent / alpha varies by prompt)")
    if abs(p["cost_factor"] - 1) > 0.05:
        parts.append(f"cost x{p['cost_factor']:.2f} (a cycle costs {p['cost_measured']:.2f} plain steps, "
                     f"the model says {p['cost_predicted']:.2f}: overheads outside the cost curve)")
    return "; ".join(parts) or "small effects on both sides"


def build_profile(curve, costs: dict[str, float], alphas: dict[str, float], meta: dict,
                  tree_curve: dict[int, float] | None = None) -> CostProfile:
    return CostProfile(curve=dict(curve), draft_cost=dict(costs), alpha=dict(alphas), measured=True, meta=meta,
                       tree_curve=dict(tree_curve or {}))


def tree_row(engine, row: dict, c: float, tree_cost) -> dict:
    """A tree method's predicted speedup (1 + E[accepted]) / (T(1 + n)/T(1) + c), where the proposer knows
    E[accepted] (Medusa: from its heads' measured accuracy), against the measured one."""
    tree = engine.static_tree
    e = engine.proposer.expected_accepted
    out = {"tree_nodes": tree.size, "tree_depth": tree.depth, "c_per_cycle": c,
           "measured_mat": row["mean_accepted_tokens"], "measured_speedup": row["speedup_vs_plain"],
           "expected_tokens": None if e is None else 1 + e,
           "predicted_speedup": None if e is None else (1 + e) / (tree_cost(tree.size) + c)}
    pred = "-" if e is None else f"{out['predicted_speedup']:.2f}x (E {1 + e:.2f})"
    print(f"{engine.method:<8} tree of {tree.size} nodes, c {c:.3f} per cycle: MAT {out['measured_mat']:.2f}, "
          f"predicted {pred}, measured {out['measured_speedup']:.2f}x")
    return out


def steady(curve: dict[int, float], trees: dict[int, float], slack: float = 0.9) -> bool:
    """Whether a measurement of verify costs looks undisturbed: no more rows (or tree nodes) measured cheaper than
    fewer, beyond `slack`. A busy VM made one measurement of the Qwen 1.5B give 3 rows 1.70 passes and 4 rows 1.44
    (a 4-node tree 2.86, an 8-node one 2.50); kept, it sized EAGLE's tree for rows 23% dearer than they are, the
    measurement again on a quiet machine giving 1.38 and 1.64 (session 56)."""
    def rising(points: dict[int, float]) -> bool:
        values = [points[n] for n in sorted(points)]
        return all(later >= slack * earlier for earlier, later in zip(values, values[1:]))
    return rising(curve) and rising(trees)


def machine_costs(model, base: CostProfile, name: str, dtype: str) -> CostProfile:
    """`base` (a shipped profile) with this machine's verify costs: `model`'s cost curve (chains of 1-12 tokens)
    and tree costs (4-32 nodes), measured once per machine, model, dtype, torch and thread count (a few seconds)
    and cached. Verification costs differ by CPU far more than acceptance does: a curve measured elsewhere makes
    `--k auto` draft where it loses. alpha and the draft costs stay `base`'s."""
    import hashlib
    import json
    import sys
    from dataclasses import replace

    from . import kernels
    from .files import atomic_file
    from .model.loader import home
    cpu = kernels.cpu_flags_lines() if model.device.type == "cpu" else [torch.cuda.get_device_name(model.device)]
    key = hashlib.sha1(json.dumps([cpu, torch.__version__, torch.get_num_threads(), name, dtype, str(model.device),
                                   kernels.status() or [kernels.build_dir().name, kernels.isa(kernels.load())],
                                   15, "steady"]).encode()).hexdigest()[:12]       # (rounds; retried if not steady)
    path = home() / "profiles" / f"verify-{key}.json"     # (costs-*.json: trees timed apart from chains)
    try:
        raw = json.loads(path.read_text())
        measured = {"curve": cost_table(raw["curve"], "curve", from_one=True),
                    "tree_curve": cost_table(raw["tree_curve"], "tree_curve")}
    except (OSError, ValueError, KeyError, TypeError, RecursionError):   # none yet, or damaged: measured again
        print("verispec: measuring this machine's verify costs for --k auto (once, a few seconds) ...", file=sys.stderr)
        # 15 rounds: on an AVX2-only VM, 7 gave a 4-node tree 1.68-2.45 passes within two hours (session 50)
        attempts = []
        while len(attempts) < 3:
            attempts.append(verify_times(model, list(range(1, 13)), [4, 8, 16, 32], 256, 15, relative=True))
            if len(attempts) == 1 and steady(*attempts[0]):
                break
        # a disturbed one is measured twice more, and each shape gets its median of the three
        measured = {part: {n: statistics.median(a[i][n] for a in attempts) for n in attempts[0][i]}
                    for i, part in enumerate(("curve", "tree_curve"))}
        with atomic_file(path) as f:
            json.dump(measured, f)
    return replace(base, curve=measured["curve"], tree_curve=measured["tree_curve"],
                   meta={**base.meta, "verify_costs": f"this machine ({path})"})


def machine_draft_cost(target, proposer, base: CostProfile, draft: str) -> CostProfile:
    """`base` (a shipped profile with this machine's verify costs, or a user's) with this machine's c for a draft:
    seconds per drafted token (k = 4 proposals after 256 cached tokens) over one target pass, measured once per
    machine, target, draft, dtype, torch and thread count (a few seconds) and cached. A draft's c is the ratio of
    two models' passes, and it differs by machine: the Qwen pair's shipped 0.55, measured on an AVX2 VM, made
    `--k auto` give up on the 0.5B on code prompts on an AMX Xeon (0.98x) where it measures 0.35 and k = 4 gives
    1.39x. `draft`: the draft's name or path (its identity in the cache key).

    Heads drafting trees (Medusa, EAGLE) get their c per cycle instead: one whole tree (a dynamic one at auto
    k's deepest), the head's catch-up step included. No profile holds that figure for the Qwen pair's head, and
    the default of 0.05 missed its cost by 5x; the default model's EAGLE head costs 0.07 of a pass on an AMX Xeon
    (its shipped profile) and 0.26 in bf16, 0.31 in gguf-q8 on an AVX2-only AMD EPYC (session 50)."""
    import hashlib
    import json
    import sys
    from dataclasses import replace

    from . import kernels
    from .engine import Engine, GenerationConfig
    from .files import atomic_file
    from .model.loader import home
    from .proposers.draft_model import DraftModelProposer
    model = target.model
    per_cycle = proposer.makes_trees and not isinstance(proposer, DraftModelProposer)
    shape = [] if proposer.tree is None else [[list(c) for c in proposer.tree.choices]]     # a static tree's
    cpu = kernels.cpu_flags_lines() if model.device.type == "cpu" else [torch.cuda.get_device_name(model.device)]
    from .api import draft_weights
    key = hashlib.sha1(json.dumps([cpu, torch.__version__, torch.get_num_threads(), target.folder, str(draft),
                                   target.dtype, draft_weights(target), str(model.device),
                                   kernels.status() or [kernels.build_dir().name, kernels.isa(kernels.load())]]
                                  + ([proposer.name, proposer.max_nodes, proposer.graft, *shape] if per_cycle
                                     else [])
                                  + ["rounds"]                 # c timed against the target pass round by round
                                  ).encode()).hexdigest()[:12]
    path = home() / "profiles" / f"draft-{key}.json"
    try:
        c = number(json.loads(path.read_text())["draft"], "draft")
    except (OSError, ValueError, KeyError, TypeError, RecursionError):   # none yet, or damaged: measured again
        print("verispec: measuring this machine's draft cost for --k auto (once, a few seconds) ...", file=sys.stderr)
        context = torch.randint(0, model.cfg.vocab_size, (256,), generator=torch.Generator().manual_seed(0)).tolist()
        step = one_token_pass(model, 256)                  # timed in the same rounds: c is each round's ratio
        if per_cycle and proposer.tree is not None:        # a static tree: draft_cost times the whole tree
            c = draft_cost(Engine(model, proposer.fork()), context, repeats=9, per_step=step)
        elif per_cycle:
            k = GenerationConfig().k_max
            c = draft_cost(Engine(model, proposer.fork()), context, k=k, repeats=9, per_step=step) * k
        else:
            c = draft_cost(Engine(model, DraftModelProposer(proposer.model)), context, repeats=9, per_step=step)
        with atomic_file(path) as f:
            json.dump({"draft": c}, f)
    name = proposer.name if per_cycle else "draft"
    return replace(base, draft_cost={**base.draft_cost, name: c},
                   meta={**base.meta, "draft_cost": f"this machine ({path})"})


def default_profile_path(folder: str, dtype: str, device) -> Path:
    from .model.loader import home
    return home() / "profiles" / f"{Path(folder).name}-{dtype}-{torch.device(device).type}.json"


def cmd_profile(args) -> int:
    import json

    from .api import Target, make_proposer
    from .bench import run_bench, select
    from .engine import Engine, GenerationConfig
    from .errors import VerispecError
    from .files import atomic_file
    from .flags import method_names
    from .prompts import load_prompts
    from .sampling import SamplingConfig
    methods = method_names(args.methods, speculative=True)
    if not isinstance(args.k, int):
        raise VerispecError("profile needs at least one speculative method and a fixed --k")
    prompts = select(load_prompts(args.prompts), args.limit)
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
    model = target.model
    path = args.out or default_profile_path(target.folder, args.dtype, model.device)
    old = CostProfile.load(path) if Path(path).exists() else None    # not a profile: fails here, before the work
    this = {"model": Path(target.folder).name, "dtype": args.dtype, "device": str(model.device)}
    was = {k: Path(str(v)).name if k == "model" else v for k, v in (old.meta if old else {}).items() if k in this}
    if any(was[k] != this[k] for k in was):
        raise VerispecError(f"{path} is the profile of {was.get('model', '?')} in {was.get('dtype', '?')} on "
                            f"{was.get('device', '?')}, not of this run's: name another --out")
    check_room(model, args.context, 64)                              # trees of up to 64 nodes are timed
    engines = {"plain": (Engine(model), 1)}
    for m in methods:               # bad methods and drafts fail here, before any measuring
        engines[m] = (Engine(model, make_proposer(m, target, args.draft, args.ngram_max)), args.k)
    print("measuring the verify cost curve ...")
    curve = cost_curve(model, list(range(1, 17)), args.context, args.repeats)
    rel = monotone_curve({n: t / curve[1] for n, t in curve.items()})
    trees = tree_costs(model, [4, 8, 16, 32, 64], args.context, args.repeats)
    ctx = target.tokenizer.prompt_ids(prompts[0].prompt)
    costs = {m: draft_cost(engines[m][0], ctx + ctx[-8:]) / curve[1] for m in methods}
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, sampling=SamplingConfig(args.temperature),
                           k_max=args.k_max,
                           seed=args.seed, stop_token_ids=target.tokenizer.stop_token_ids)
    print(f"running {', '.join(engines)} on {len(prompts)} prompts at k = {args.k}, T = {args.temperature} ...")
    results, runs = run_bench(target, engines, prompts, cfg, not args.no_chat)
    isolated = dict(costs)
    for m in methods:           # auto k needs the cost generation actually pays
        costs[m] = in_situ_cost(runs, m) or costs[m]
    report = {"curve": rel, "tree_curve": trees, "draft_cost": costs, "draft_cost_isolated": isolated,
              "methods": {}}
    print("\nT(n)/T(1): " + " ".join(f"{n}:{rel[n]:.2f}" for n in (2, 4, 8, 16)) +
          " | trees: " + " ".join(f"{n}:{v:.2f}" for n, v in trees.items()))
    print("draft cost c per token, in situ (isolated): " + ", ".join(f"{m} {costs[m]:.3f} ({isolated[m]:.3f})"
                                                                   for m in methods))
    print(f"{'method':<8} {'c':>6} {'alpha':>6} {'MAT':>5} {'E(a,k)':>7} {'predicted':>9} {'measured':>9}  gap")
    alphas = {}
    tree_cost = CostProfile(curve=rel, tree_curve=trees).tree_cost
    for m in methods:
        row = next(r for r in results if r["method"] == m and r["category"] == "all")
        if m in TREE_METHODS:
            report["methods"][m] = tree_row(engines[m][0], row, costs[m], tree_cost)
            continue
        p = predicted_vs_measured(row, costs[m], rel, args.k)
        hist = [0] * (args.k + 1)
        for r in runs:
            for n, count in enumerate(r[m]["accepted_length_histogram"]):
                hist[min(n, args.k)] += count
        corr = correlation_report(hist, p["alpha"], args.k) if sum(hist) else None
        by_cat = {r["category"]: r["acceptance_rate"] for r in results if r["method"] == m}
        alphas[m] = p["alpha"]
        report["methods"][m] = {**p, "explanation": explain(p), "by_position": row["acceptance_by_position"],
                                "by_category": by_cat, "histogram": corr}
        print(f"{m:<8} {costs[m]:>6.3f} {p['alpha']:>6.2f} {p['measured_mat']:>5.2f} {p['expected_tokens']:>7.2f} "
              f"{p['predicted_speedup']:>8.2f}x {p['measured_speedup']:>8.2f}x  {p['gap']:+.0%}: {explain(p)}")
        if corr:
            print(f"         accepted-length histogram vs geometric: TV {corr['total_variation']:.3f}; all {args.k} "
                  f"accepted {corr['all_accepted_observed']:.2f} observed vs {corr['all_accepted_geometric']:.2f}")
    meta = {"model": target.folder, "dtype": args.dtype, "device": str(model.device), "k": args.k,
            "temperature": args.temperature, "prompts": len(prompts)}
    profile = build_profile(rel, costs, alphas, meta, trees)
    if old is not None:         # keep what this run did not measure: other methods, `cost-curve --batch` curves
        profile.batch_curve, profile.batch_scale = old.batch_curve, old.batch_scale
        profile.draft_cost = {**old.draft_cost, **profile.draft_cost}
        profile.alpha = {**old.alpha, **profile.alpha}
    profile.save(path)
    if args.json_out:
        with atomic_file(args.json_out) as f:
            json.dump({**report, "meta": meta, "results": results}, f, indent=1, default=float)
    print(f"\nprofile written to {path}")
    return 0
