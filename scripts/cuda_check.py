"""One-shot CUDA check of the engine (run on a GPU machine): correctness first, then speed, each part on its own.

    python scripts/cuda_check.py [--out DIR] [--limit N] [--max-new-tokens N] [--device cuda] [--parts a,b]

1. fixed-shape passes (`model.graphs`, CUDA graphs) against eager passes: a chain, and a token tree against each of
   its paths alone (logits max |diff|, argmax agreement);
2. greedy output of every method equal to graphed plain decoding, and graphed plain equal to eager plain, on the
   development prompts (`bench/dev_prompts.jsonl`, N per category);
3. the accept rule's statistical exactness test with CUDA tensors;
4. host-device synchronisations per cycle at T = 0 and T = 1 (`torch.cuda.set_sync_debug_mode`), with the call
   site (file:line) of each;
5. speed at T = 0: plain eager and graphed (bf16, fp32), every method's speedup over graphed plain (per prompt,
   side by side, median), and the verify cost T(1 + n)/T(1) of chains and trees.
6. continuous batching (the server's `Batch`) at concurrency 1, 4 and 8: total tok/s;
7. where a cycle's host time goes, op by op, for EAGLE's trees and the draft model (`profile`);
8. EAGLE's trees drafted pass by pass and in one graph, side by side (`stepwise`).
Writes cuda_check.json to --out after each part, and prints a summary table last. `--device cpu` is a dry run: the same
fixed-shape passes, uncaptured.

Getting there: the GPU machine reaches nothing outside and each call carries at most 64 MiB, while the tracked
tree is ~91 MB and the default GGUF 98 MB. `python scripts/cuda_payload.py pack` packs the shipped drafts, the GGUF,
the `gguf` wheel and the long prompts into two calls' parts under the ignored .dev/ with a run.sh that sets up and
runs this script (VERISPEC_KERNELS=0); `untrack` and `restore` take verispec/drafts and bench/results out of the
index for the two calls and put them back (its docstring gives the calls; session 34's by hand:
`bench/results/s34/gpu_run.sh`).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from verispec.api import Target, make_engine  # noqa: E402
from verispec.costs import verify_times  # noqa: E402
from verispec.engine import Engine, GenerationConfig  # noqa: E402
from verispec.prompts import load_prompts  # noqa: E402
from verispec.sampling import SamplingConfig, probs  # noqa: E402
from verispec.tree import build_tree  # noqa: E402
from verispec.verify import verify_chain  # noqa: E402

# (label, method, tree, k): every method, chains at two lengths, trees that fit the 16- and 32-row buckets
CONFIGS = [("ngram k4", "ngram", None, 4), ("ngram k8", "ngram", None, 8),
           ("draft k4", "draft", None, 4), ("draft k6", "draft", None, 6), ("draft-tree", "draft-tree", None, 8),
           ("medusa", "medusa", None, 8), ("medusa 15", "medusa", "15", 8),
           ("eagle chain k4", "eagle", None, 4), ("eagle auto+ngram", "eagle", "auto+ngram", 8),
           ("eagle dynamic+ngram", "eagle", "dynamic+ngram", 8), ("eagle 15", "eagle", "15", 8),
           ("eagle 31", "eagle", "31", 8)]


# the parts of a run (`--parts`): each part's name begins with one of these
PARTS = ("pass", "exactness", "plain", "methods", "t1", "long", "syncs", "serve", "verify", "profile", "stepwise")
TREES = ("eagle auto+ngram", "eagle dynamic+ngram", "eagle 15", "eagle 31")   # EAGLE's trees
MAIN = ("ngram k4", "draft k4", "draft-tree", "medusa 15", "eagle chain k4", "eagle auto+ngram",
        "eagle dynamic+ngram", "eagle 15")


def graphs_on(on: bool) -> None:
    os.environ["VERISPEC_CUDA_GRAPHS"] = "1" if on else "0"


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def run_part(report, name, fn):
    """Run one part; a failure is recorded and printed, and the next part still runs."""
    t0 = time.perf_counter()
    try:
        report[name] = fn()
    except Exception as e:  # noqa: BLE001 -- one broken part must not hide the others' results
        report[name] = {"error": f"{type(e).__name__}: {e}"}
        traceback.print_exc()
    print(f"[{name}] {time.perf_counter() - t0:.1f} s: {json.dumps(report[name])[:600]}", flush=True)


@torch.inference_mode()
def pass_agreement(target: Target):
    """Graphed passes against eager ones after a 300-token context: a 5-row chain, and a 15-node tree's rows
    against each root-to-node path decoded alone (eager)."""
    model, dev = target.model, target.model.device
    g = torch.Generator().manual_seed(0)
    ctx = torch.randint(0, model.cfg.vocab_size, (1, 300), generator=g).to(dev)

    def primed():
        graphs_on(False)
        cache = model.new_cache(512)
        model(ctx, torch.arange(300, device=dev)[None], cache)
        return cache
    out = {}
    chain = torch.randint(0, model.cfg.vocab_size, (1, 5), generator=g).to(dev)
    pos = torch.arange(300, 305, device=dev)[None]
    eager = model.logits(model(chain, pos, primed()))
    cache = primed()
    graphs_on(True)
    got = model.logits(model(chain, pos, cache))
    out["chain_max_abs_diff"] = float((got - eager).abs().max())
    out["chain_argmax_agree"] = float((got.argmax(-1) == eager.argmax(-1)).float().mean())
    tree = build_tree([(0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (2, 0), (0, 0, 0), (0, 0, 1), (0, 1, 0),
                       (1, 0, 0), (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 1, 0), (0, 0, 0, 0, 0)])
    tokens = torch.randint(0, model.cfg.vocab_size, (1, 1 + tree.size), generator=g).to(dev)
    positions = (300 + torch.tensor(tree.depths))[None].to(dev)
    mask = torch.cat([torch.ones(1 + tree.size, 300, dtype=torch.bool), tree.ancestry], 1)[None].to(dev)
    cache = primed()
    graphs_on(True)
    got = model.logits(model(tokens, positions, cache, mask))[0]
    diffs, agree = [], []
    for node in range(1 + tree.size):
        path = tree.ancestry[node].nonzero().flatten().tolist()                   # root .. node
        c = primed()
        alone = model.logits(model(tokens[:, path], torch.arange(300, 300 + len(path), device=dev)[None], c))[0, -1]
        diffs.append(float((got[node] - alone).abs().max()))
        agree.append(bool(got[node].argmax() == alone.argmax()))
    graphs_on(True)
    out["tree_max_abs_diff"] = max(diffs)
    out["tree_argmax_agree"] = sum(agree) / len(agree)
    return out


def engines(target: Target):
    out = {"plain": (Engine(target.model), 4)}
    for label, method, tree, k in CONFIGS:
        try:
            out[label] = (make_engine(method, target, tree=tree), k)
        except Exception as e:  # noqa: BLE001
            print(f"cannot build {label}: {e}", flush=True)
    return out


def run(engine, ids, k, target, max_new, sampling=None, graphed=False):
    if graphed:
        graphs_on(True)
    cfg = GenerationConfig(max_new_tokens=max_new, k=k, stop_token_ids=target.tokenizer.stop_token_ids,
                           sampling=sampling or SamplingConfig())
    sync(target.model.device.type)
    return engine.generate(ids, cfg)


def methods(target: Target, prompts, max_new, repeats, temperature=0.0, eager=4, only=None):
    """Every method against graphed plain decoding, side by side per prompt: tok/s, speedup, MAT, drafting and
    verification ms per cycle, and (at T = 0) greedy equality with plain; graphed plain against eager plain on the
    first `eager` prompts. only: the labels to run (default all)."""
    tok = target.tokenizer
    es = {m: v for m, v in engines(target).items() if only is None or m in only or m == "plain"}
    longest = max(prompts, key=lambda p: len(p.prompt))                  # its cache serves every prompt after
    for e, k in es.values():                                        # warm up: capture every bucket used
        run(e, tok.prompt_ids(longest.prompt), k, target, 32)
    sampling = SamplingConfig(temperature=temperature)
    same = {m: 0 for m in es}
    rates, ratios, mat, draft_ms, verify_ms = ({m: [] for m in es} for _ in range(5))
    eager_same = 0
    for n, p in enumerate(prompts):
        ids = tok.prompt_ids(p.prompt)
        if n < eager and temperature == 0:
            graphs_on(False)
            eager_same += run(es["plain"][0], ids, 4, target, max_new).token_ids == \
                run(es["plain"][0], ids, 4, target, max_new, graphed=True).token_ids
            graphs_on(True)
        rate = {m: 0.0 for m in es}                                 # mean tok/s over the repeats
        outs = {}
        for _ in range(repeats):
            for m, (e, k) in es.items():
                r = run(e, ids, k, target, max_new, sampling)
                rate[m] += r.stats.tokens_per_s / repeats
                outs[m] = r
        ref = outs["plain"].token_ids
        for m, r in outs.items():
            same[m] += r.token_ids == ref
            rates[m].append(rate[m])
            ratios[m].append(rate[m] / rate["plain"])
            mat[m].append(r.stats.mean_accepted_tokens or 1.0)
            cycles = max(r.stats.target_passes - 1, 1)
            draft_ms[m].append(1e3 * r.stats.time_draft_s / cycles)
            verify_ms[m].append(1e3 * r.stats.time_verify_s / cycles)
    med = lambda d: {m: round(statistics.median(v), 3) for m, v in d.items()}  # noqa: E731
    out = {"prompts": len(prompts), "temperature": temperature, "tok_s_median": med(rates),
           "speedup_median": med(ratios), "mat_median": med(mat), "draft_ms_per_cycle": med(draft_ms),
           "verify_ms_per_cycle": med(verify_ms)}
    if temperature == 0:
        out["greedy_equal_to_plain"] = {m: v / len(prompts) for m, v in same.items()}
        out["graphed_plain_equals_eager_plain"] = f"{eager_same}/{min(eager, len(prompts))}"
    return out


def stepwise(target: Target, prompts, max_new):
    """EAGLE's trees drafted pass by pass (each head pass its own replay, as before session 35's `DraftGraph`)
    and in one graph, against plain decoding, side by side in one run."""
    from verispec.proposers import eagle
    out = {}
    for one in (False, True):
        eagle._ONE_GRAPH[0] = one
        try:
            out["one graph" if one else "pass by pass"] = methods(target, prompts, max_new, 1, only=TREES)
        finally:
            eagle._ONE_GRAPH[0] = True
    return out


def plain_speed(target: Target, prompts, max_new, eager=4):
    """Plain decoding's tok/s (median over prompts), eager on the first `eager` prompts and graphed on them all."""
    tok = target.tokenizer
    e = Engine(target.model)
    out = {}
    for on in (False, True):
        graphs_on(on)
        run(e, tok.prompt_ids("Hello"), 4, target, 16)
        some = prompts if on else prompts[:eager]
        out["graphed" if on else f"eager (first {eager})"] = statistics.median(
            run(e, tok.prompt_ids(p.prompt), 4, target, max_new).stats.tokens_per_s for p in some)
    graphs_on(True)
    return out


def syncs_per_cycle(target: Target, prompt: str, temperature: float = 0.0):
    """Host-device synchronisations per decoding cycle, counted by PyTorch's sync debug mode, and where they come
    from: each call site (file:line of the Python that asked) with its count per cycle."""
    if target.model.device.type != "cuda":
        return "cuda only"
    out, sampling = {}, SamplingConfig(temperature=temperature)
    for label, (e, k) in engines(target).items():
        ids = target.tokenizer.prompt_ids(prompt)
        run(e, ids, k, target, 16, sampling)
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                r = run(e, ids, k, target, 48, sampling)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        cycles = max(r.stats.target_passes - 1, 1)
        sites: dict[str, int] = {}
        for w in caught:
            where = f"{Path(w.filename).name}:{w.lineno}"
            sites[where] = sites.get(where, 0) + 1
        out[label] = {"per_cycle": round(len(caught) / cycles, 2),
                      "sites": {s: round(n / cycles, 2) for s, n in sorted(sites.items(), key=lambda x: -x[1])}}
    return out


def op_profile(target: Target, prompt: str, labels=("eagle 15", "eagle dynamic+ngram", "draft k4"), top=15):
    """Where a cycle's time goes: a 48-token generation of each method under PyTorch's profiler, the ops that
    cost the host most (self CPU ms per cycle, with their calls and device ms per cycle), so the next change
    aims at the cost that is there."""
    from torch.profiler import ProfilerActivity, profile
    out = {}
    es = engines(target)
    for label in labels:
        if label not in es:
            continue
        e, k = es[label]
        ids = target.tokenizer.prompt_ids(prompt)
        run(e, ids, k, target, 16)
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if target.model.device.type == "cuda" else [])
        with profile(activities=acts) as prof:
            r = run(e, ids, k, target, 48)
        cycles = max(r.stats.target_passes - 1, 1)
        rows = sorted(prof.key_averages(), key=lambda a: -a.self_cpu_time_total)[:top]
        out[label] = {"cycles": cycles, "ms_per_cycle": round(1e3 * r.stats.time_total_s / cycles, 3),
                      "ops": [{"op": a.key, "calls": round(a.count / cycles, 1),
                               "self_cpu_ms": round(a.self_cpu_time_total / 1e3 / cycles, 3),
                               "device_ms": round(getattr(a, "self_device_time_total", 0) / 1e3 / cycles, 3)}
                              for a in rows]}
    return out


def serve_batch(target: Target, prompts, max_new):
    """Continuous batching (`verispec.serve`'s `Batch`) at several concurrencies: total tok/s over the prompts,
    prefills and each new sequence's graph captures included (a request's cache is new, so are its graphs)."""
    from verispec.serve.commands import decode_batch
    ids = [target.tokenizer.prompt_ids(p.prompt) for p in prompts]
    cfg = GenerationConfig(max_new_tokens=max_new, k=4, stop_token_ids=target.tokenizer.stop_token_ids)
    out = {}
    for method in ("plain", "ngram", "draft"):
        for c in (1, 4, 8):
            seconds, seqs = decode_batch(target, method, ids, cfg, c)
            out[f"{method} x{c}"] = round(sum(len(s.out) for s in seqs) / seconds, 1)
    return out


def exactness_on(dev):
    import test_exactness as t
    results = {}
    for k, temperature, top_p in [(3, 1.0, 1.0), (4, 0.7, 0.9)]:
        cfg = SamplingConfig(temperature=temperature, top_p=top_p)
        a, b = t.tables(seed=k)
        p, q = probs(a.to(dev), cfg), probs(b.to(dev), cfg)
        samples = t.simulate(p, q, k, k + 1, verify_chain, seed=7, device=dev)
        results[f"k={k},T={temperature},top_p={top_p}"] = t.gof_pvalue(samples.cpu(), t.exact_joint(p.cpu(), k + 1))
    biased = t.simulate(p, q, 4, 5, t.residual_free_verifier, seed=7, device=dev)
    results["planted residual-free verifier"] = t.gof_pvalue(biased.cpu(), t.exact_joint(p.cpu(), 5))
    return results


def verify_cost(target: Target, on: bool):
    graphs_on(on)
    chains, trees = verify_times(target.model, list(range(1, 9)), [4, 8, 16, 32, 64], context=256, repeats=20,
                                 relative=True)
    graphs_on(True)
    return {"chain": {n: round(v, 3) for n, v in chains.items()}, "tree": {n: round(v, 3) for n, v in trees.items()}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--limit", type=int, default=4, help="development prompts per category")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--fp32", action="store_true", help="also time plain decoding in fp32")
    ap.add_argument("--long", help="a JSONL of long prompts (../shared/data/prompts/long.jsonl) to time too")
    ap.add_argument("--long-limit", type=int, default=4, help="long prompts per category")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"which parts to run, of {','.join(PARTS)}")
    args = ap.parse_args()
    parts = set(args.parts.split(","))
    if parts - set(PARTS):
        sys.exit(f"cuda_check: unknown parts {sorted(parts - set(PARTS))}; choose from {','.join(PARTS)}")
    dev = args.device
    if dev == "cpu":                                # a dry run: fixed-shape passes, uncaptured
        from verispec.model import graphs
        graphs._everywhere[0] = True
    report = {"device": torch.cuda.get_device_name() if dev == "cuda" else dev, "torch": torch.__version__}
    graphs_on(True)
    by_cat = {}
    for p in load_prompts([ROOT / "bench" / "dev_prompts.jsonl"]):
        by_cat.setdefault(p.category, []).append(p)
    prompts = [p for ps in by_cat.values() for p in ps[:args.limit]]
    t0 = time.perf_counter()
    target = Target.load(None, "bf16", dev)
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def part(name, fn):
        if name.split("_")[0] in parts:
            run_part(report, name, fn)
            (out / "cuda_check.json").write_text(json.dumps(report, indent=1))   # kept if a later part overruns
    part("pass_agreement_bf16", lambda: pass_agreement(target))
    part("exactness_pvalues", lambda: exactness_on(dev))
    part("plain_bf16", lambda: plain_speed(target, prompts, args.max_new_tokens))
    part("methods_bf16", lambda: methods(target, prompts, args.max_new_tokens, args.repeats))
    part("t1_methods_bf16", lambda: methods(target, prompts, args.max_new_tokens, 1, temperature=1.0, only=MAIN))
    part("stepwise_methods_bf16", lambda: stepwise(target, prompts, args.max_new_tokens))
    if args.long:
        cats = {}
        for p in load_prompts([args.long]):
            cats.setdefault(p.category, []).append(p)
        long = [p for ps in cats.values() for p in ps[:args.long_limit]]
        part("long_methods_bf16", lambda: methods(target, long, 128, 1, only=MAIN))
    part("syncs_per_cycle", lambda: syncs_per_cycle(target, prompts[0].prompt))
    part("syncs_per_cycle_t1", lambda: syncs_per_cycle(target, prompts[0].prompt, 1.0))
    part("serve_batch_tok_s", lambda: serve_batch(target, prompts, args.max_new_tokens))
    part("profile_ops", lambda: op_profile(target, prompts[0].prompt))
    part("verify_cost_graphed_bf16", lambda: verify_cost(target, True))
    part("verify_cost_eager_bf16", lambda: verify_cost(target, False))
    if args.fp32:
        del target
        t32 = Target.load(None, "fp32", dev)
        part("pass_agreement_fp32", lambda: pass_agreement(t32))
        part("plain_fp32", lambda: plain_speed(t32, prompts, args.max_new_tokens))
        part("methods_fp32", lambda: methods(t32, prompts, args.max_new_tokens, 1, only=MAIN))
    tables = {n: report.get(n, {}) for n in ("methods_bf16", "t1_methods_bf16", "long_methods_bf16", "methods_fp32")}
    for how, m in (report.get("stepwise_methods_bf16") or {}).items():
        tables[f"trees, {how}"] = m
    for name, m in tables.items():
        if "speedup_median" not in m:
            continue
        print(f"\n{name:20s} {'tok/s':>8s} {'speedup':>8s} {'MAT':>6s} {'draft ms':>9s} {'verify ms':>9s} "
              f"{'==plain':>8s}")
        for k in m["speedup_median"]:
            print(f"{k:20s} {m['tok_s_median'][k]:8.1f} {m['speedup_median'][k]:8.2f} {m['mat_median'][k]:6.2f} "
                  f"{m['draft_ms_per_cycle'][k]:9.3f} {m['verify_ms_per_cycle'][k]:9.3f} "
                  f"{m.get('greedy_equal_to_plain', {}).get(k, float('nan')):8.2f}")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
