"""`verispec audit --url` and `verispec bench --url`: the local audit's tests and the local benchmark's figures,
on any OpenAI-compatible endpoint (a deployment with speculation, checked against one without).

The remote audit sends the same prompt, temperature and top-p N times to each endpoint, with distinct seeds (the
reference's seed0 + i, the tested endpoint's seed0 + 1000003 + i), and compares the two samples of the first M
tokens with `audit.audit_tests`: a chi-square test of homogeneity on the joint law and one per position,
Bonferroni-combined. Outcomes are the tokens the servers return with their log-probabilities, or, from a server
that returns none, the text cut into pieces (runs of word characters, single punctuation marks, whitespace)
by one fixed rule: any fixed function of the sampled text has the same law under both servers when the servers
sample the same law, so the tests stay valid, only less sharp than on tokens. Where both servers return
log-probabilities, one more test compares the samples' log-likelihoods of their first M tokens under the
servers' own model (Mann-Whitney): lossy acceptance rules shift it even where no single position does.
"""
from __future__ import annotations

import json
import re
import statistics
import sys

from .audit import SEED_OFFSET, AuditResult, audit_tests, print_verdict
from .errors import VerispecError
from .remote import Endpoint, Sample, sample, speculation_counters, timed

PIECES = re.compile(r"\w+|[^\w\s]|\s+")


def outcomes(samples: list[Sample], m: int, tokens: bool) -> list[tuple]:
    """The first m tokens (tokens=True) or text pieces of each sample, padded with "<end>"."""
    out = []
    for s in samples:
        seq = s.tokens[:m] if tokens else PIECES.findall(s.text)[:m]
        out.append(tuple(seq) + ("<end>",) * (m - len(seq)))
    return out


def loglik_test(a: list[Sample], b: list[Sample], m: int, level: float) -> AuditResult:
    """Two-sample Mann-Whitney test of the log-likelihood of each sample's first m tokens."""
    from scipy.stats import mannwhitneyu
    la, lb = [sum(s.logprobs[:m]) for s in a], [sum(s.logprobs[:m]) for s in b]
    if len(set(la) | set(lb)) < 2:
        return AuditResult(0.0, 0, 1.0, 1, 0.0, True)
    r = mannwhitneyu(la, lb, alternative="two-sided")
    return AuditResult(float(r.statistic), 1, float(r.pvalue), 2, abs(statistics.mean(la) - statistics.mean(lb)),
                       float(r.pvalue) >= level)


def _endpoints(args, urls: list[str]) -> list[Endpoint]:
    return [Endpoint(u, args.remote_model, chat=not args.no_chat) for u in urls]


def cmd_audit_remote(args) -> int:
    from tqdm import tqdm
    if not args.reference_url:
        raise VerispecError("audit --url needs --reference-url: the same model served without speculation")
    if args.samples < 10 or args.tokens < 1 or args.concurrency < 1:
        raise VerispecError("audit needs --samples >= 10, --tokens >= 1 and --concurrency >= 1")
    tested, reference = _endpoints(args, [args.url, args.reference_url])
    if args.remote_model is None and tested.resolve_model() != reference.resolve_model():
        raise VerispecError(f"the endpoints serve different models ({tested.model} and {reference.model}); "
                            "name the one to compare with --remote-model")
    before = speculation_counters(tested)
    draw = dict(max_tokens=args.tokens, temperature=args.temperature, top_p=args.top_p,
                concurrency=args.concurrency)
    with tqdm(total=2 * args.samples, desc="audit", unit="sample", file=sys.stderr) as bar:
        a = sample(reference, args.prompt, args.samples, args.seed, progress=bar, **draw)
        b = sample(tested, args.prompt, args.samples, args.seed + SEED_OFFSET, progress=bar, **draw)
    after = speculation_counters(tested)
    by_tokens = all(s.tokens is not None for s in a + b)
    tests, _ = audit_tests(outcomes(a, args.tokens, by_tokens), outcomes(b, args.tokens, by_tokens), args.level,
                           skip=0)
    if by_tokens and all(s.logprobs is not None for s in a + b):
        tests.append(("loglik", loglik_test(a, b, args.tokens, args.level)))
    if all(r.dof == 0 for _, r in tests) and len({s.text for s in a + b}) > 1:
        raise VerispecError("the audit has no power here: every outcome is too rare to test; lower "
                            "--temperature, test fewer --tokens or take more --samples")
    unit = "tokens" if by_tokens else "text pieces (the servers returned no logprobs)"
    print(f"audit {tested.base} against {reference.base} ({tested.model}): {args.samples} samples each of "
          f"the first {args.tokens} {unit}, T={args.temperature}, top-p={args.top_p}")
    if before is not None and after is not None:
        drafted, accepted = after[1] - before[1], after[2] - before[2]
        print(f"  the tested server ({before[0]} metrics) drafted {drafted:.0f} tokens and accepted {accepted:.0f}")
        if drafted == 0:
            raise VerispecError(f"{tested.base} drafted nothing during the audit, so it cannot test speculation; "
                                "try a prompt whose answer repeats its input, or more --tokens")
    return 0 if print_verdict(tests, args.level) else 1


def cmd_bench_remote(args) -> int:
    from .files import atomic_file
    from .bench import select
    from .prompts import load_prompts
    if args.repeats < 1 or args.max_new_tokens < 1:
        raise VerispecError("--repeats and --max-new-tokens must be >= 1")
    methods = [m for m in (args.request_methods or "").split(",") if m] or [None]
    rows = [(e, m) for e in _endpoints(args, args.url) for m in methods]
    names = [e.base + (f" [{m}]" if m else "") for e, m in rows]
    prompts = select(load_prompts(args.prompts), args.limit)
    extra = [{"speculative": {"method": m}} if m else None for _, m in rows]
    for (e, _), x in zip(rows, extra):                         # warm-up, not reported
        timed(e, prompts[0].prompt, 4, args.temperature, args.top_p, args.seed, x)
    runs = {n: [] for n in names}
    for i, p in enumerate(prompts):
        for rep in range(args.repeats):
            order = range(len(rows)) if (i + rep) % 2 == 0 else reversed(range(len(rows)))   # alternate
            for j in order:
                (e, _), x = rows[j], extra[j]
                c0 = speculation_counters(e)
                t = timed(e, p.prompt, args.max_new_tokens, args.temperature, args.top_p, args.seed, x)
                c1 = speculation_counters(e)
                spec = (c1[1] - c0[1], c1[2] - c0[2]) if c0 and c1 else None
                runs[names[j]].append({"prompt": p.id, "category": p.category, "repeat": rep, "text": t.text,
                                       "completion_tokens": t.completion_tokens, "ttft_s": t.ttft_s,
                                       "total_s": t.total_s, "tok_s": t.completion_tokens / t.total_s,
                                       "drafted": spec and spec[0], "accepted": spec and spec[1]})
    results = summarize(names, runs, args.temperature)
    print(f"{'endpoint':<44} {'n':>4} {'tok/s':>7} {'decode':>7} {'TTFT s':>7} {'accept':>7} {'vs 1st':>7} "
          f"{'same':>5}")
    for name, r in results.items():
        acc = "-" if r["acceptance"] is None else f"{r['acceptance']:.2f}"
        same = "-" if r["identical_to_first"] is None else f"{r['identical_to_first']:.0%}"
        print(f"{name[:44]:<44} {r['runs']:>4} {r['tok_s']:>7.1f} {r['decode_tok_s']:>7.1f} {r['ttft_s']:>7.3f} "
              f"{acc:>7} {r['speedup_vs_first']:>6.2f}x {same:>5}")
    if args.json_out:
        try:
            with atomic_file(args.json_out) as fh:
                json.dump({"endpoints": names, "temperature": args.temperature, "max_new_tokens":
                           args.max_new_tokens, "repeats": args.repeats, "results": results, "runs": runs}, fh,
                          indent=1)
        except OSError as e:
            raise VerispecError(f"cannot write {args.json_out}: {e}") from None
    return 0


def summarize(names: list[str], runs: dict, temperature: float) -> dict:
    """Median figures per endpoint; speedups are medians of per-run ratios to the first endpoint's same run."""
    first = runs[names[0]]
    out = {}
    for name in names:
        rs = runs[name]
        drafted = sum(r["drafted"] or 0 for r in rs)
        decode = [(r["completion_tokens"] - 1) / (r["total_s"] - r["ttft_s"]) for r in rs
                  if r["completion_tokens"] > 1 and r["total_s"] > r["ttft_s"]]
        out[name] = {
            "runs": len(rs), "tok_s": statistics.median(r["tok_s"] for r in rs),
            "decode_tok_s": statistics.median(decode) if decode else 0.0,
            "ttft_s": statistics.median(r["ttft_s"] for r in rs),
            "acceptance": sum(r["accepted"] or 0 for r in rs) / drafted if drafted else None,
            "speedup_vs_first": statistics.median(r["tok_s"] / f["tok_s"] for r, f in zip(rs, first)),
            "identical_to_first": (sum(r["text"] == f["text"] for r, f in zip(rs, first)) / len(rs)
                                   if temperature == 0 else None)}
    return out
