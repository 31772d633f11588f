"""`verispec audit`: test, on the real model, that speculative sampling is distributed as plain sampling.

Both samplers generate the first M + 1 tokens of the same prompt N times each, with independent seeds; the first
comes from the prefill, plain sampling in both, so the tests skip it and look only at the M tokens that
speculation produced. A chi-square
test of homogeneity on a 2 x C table of outcome counts asks whether two samples come from one distribution; outcomes
too rare for the chi-square approximation (expected count < 5) are pooled into one "other" cell. M + 1 such tests
run: one on the joint law of the M-token sequences, and one on the token at each position 1..M (a stop counts as a
token). At temperature 1 the joint law is spread thin, so the per-position tests carry most of the power. The
verdict uses the Bonferroni-combined p-value, min(1, (M + 1) * smallest p).
"""
from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .errors import VerispecError

SEED_OFFSET = 1_000_003  # speculative runs use seeds disjoint from the plain runs'


@dataclass
class AuditResult:
    statistic: float
    dof: int
    p_value: float
    cells: int
    total_variation: float   # between the two empirical distributions (before pooling)
    passed: bool


def homogeneity_test(a: Counter, b: Counter, level: float = 0.01, min_expected: float = 5.0) -> AuditResult:
    """Chi-square test that samples `a` and `b` (outcome -> count) share one distribution."""
    from scipy.stats import chi2
    na, nb = sum(a.values()), sum(b.values())
    if na == 0 or nb == 0:
        raise VerispecError("audit needs at least one sample per sampler")
    keys = sorted(set(a) | set(b), key=lambda x: -(a[x] + b[x]))
    tv = 0.5 * sum(abs(a[x] / na - b[x] / nb) for x in keys)
    n = na + nb
    rows, other = [], [0, 0]
    for x in keys:
        total = a[x] + b[x]
        if total * min(na, nb) / n >= min_expected:
            rows.append([a[x], b[x]])
        else:
            other[0] += a[x]
            other[1] += b[x]
    if sum(other):  # pooled rare outcomes: a cell of their own if large enough, else merged into the rarest cell
        if sum(other) * min(na, nb) / n >= min_expected or not rows:
            rows.append(other)
        else:
            rows[-1] = [rows[-1][0] + other[0], rows[-1][1] + other[1]]
    table = np.array(rows, dtype=float)               # [cells, 2]
    if len(table) < 2:  # every run gave the same outcome in both samplers: nothing to tell apart
        return AuditResult(0.0, 0, 1.0, len(table), tv, True)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / n
    statistic = float(((table - expected) ** 2 / expected).sum())
    dof = len(table) - 1
    p = float(chi2.sf(statistic, dof))
    return AuditResult(statistic, dof, p, len(table), tv, p >= level)


def sample_sequences(engine, prompt_ids, cfg, samples: int, seed0: int, progress, batch: int = 1
                     ) -> tuple[list[tuple], int, int]:
    """`samples` runs of the first cfg.max_new_tokens tokens (run i with seed seed0 + i), each padded with "<stop>"
    if it stopped early, `batch` runs at a time in packed passes (`serve.batch.Batch`, every run pinned to its own
    k schedule): a run's tokens are what it would sample alone, bit for bit, so the batch changes only the time.
    The prompt is run once (`_SharedPrompt`), and every run continues from a copy of it.

    Returns the sequences and the drafted and accepted token totals (to show the drafts were exercised).
    """
    from dataclasses import replace

    from .engine import Sequence
    from .proposers.base import fork
    from .serve.batch import Batch
    done: dict[int, object] = {}                                # run i -> its result (seed seed0 + i)

    def record(seq):
        done[seq.cfg.seed - seed0] = seq.result()
        progress.update(1)
    profile = engine.profile if cfg.k == "auto" else None       # (a fixed k never measures a cost profile)
    packed, pending, shared = Batch(engine.target, profile), iter(range(samples)), None
    while True:
        while len(packed) < batch and (i := next(pending, None)) is not None:
            seq = Sequence(engine.target, fork(engine.proposer), prompt_ids, replace(cfg, seed=seed0 + i),
                           packed.profile)
            shared = shared or _SharedPrompt(seq)
            shared.prefill(seq)
            packed.join(seq, pinned=True)
            if seq.done:                                        # it stopped at its first token
                record(seq)
        if not packed.running:
            break
        for seq in packed.step():
            record(seq)
        failed = packed.take_failed()
        if failed:                                              # a run's own error: the audit cannot go on
            raise failed[0][1]
    out = [tuple(done[i].token_ids) + ("<stop>",) * (cfg.max_new_tokens - len(done[i].token_ids))
           for i in range(samples)]
    return (out, sum(g.stats.drafted_tokens for g in done.values()),
            sum(g.stats.accepted_tokens for g in done.values()))


class _SharedPrompt:
    """The audit's prompt run through the target once: its keys and values (a cache) and its hidden states.
    `prefill(seq)` gives a run (the same prompt, proposer and settings but the seed, so the same capacity) a copy of
    both (`Sequence.prefill`'s `hidden`): the same bits as the run's own prefill, and a proposer that reads features
    (EAGLE) sees every prompt position's."""

    def __init__(self, seq):
        import torch
        prompt, target = seq.prompt, seq.target
        self.cache = target.new_cache(seq.capacity)
        tokens = torch.tensor([prompt], device=target.device)                               # [1, n]
        positions = torch.arange(len(prompt), device=target.device)[None]                  # [1, n]
        with torch.inference_mode():
            self.hidden = target(tokens, positions, self.cache)                            # [1, n, D]

    def prefill(self, seq) -> None:
        cache = seq.target.new_cache(seq.capacity)
        cache.k.copy_(self.cache.k)
        cache.v.copy_(self.cache.v)
        cache.advance(self.cache.length)
        seq.prefill(cache, seq.prompt, self.hidden)


def audit_tests(a: list[tuple], b: list[tuple], level: float, skip: int = 1
                ) -> tuple[list[tuple[str, AuditResult]], float]:
    """The joint test and one test per position, past the first `skip` tokens (the prefill's: plain sampling in
    both samplers); returns them and the Bonferroni-combined p-value."""
    a, b = [s[skip:] for s in a], [s[skip:] for s in b]
    tests = [("joint", homogeneity_test(Counter(a), Counter(b), level))]
    for i in range(len(a[0])):
        tests.append((f"token {i + 1 + skip}", homogeneity_test(Counter(s[i] for s in a), Counter(s[i] for s in b),
                                                                level)))
    return tests, bonferroni(tests)


def bonferroni(tests: list[tuple[str, AuditResult]]) -> float:
    """The combined p-value of several tests: min(1, number of tests * smallest p)."""
    return min(1.0, len(tests) * min(r.p_value for _, r in tests))


def print_verdict(tests: list[tuple[str, AuditResult]], level: float) -> bool:
    """Print each test and the combined verdict; True for PASS. A test named "loglik" is a Mann-Whitney U test
    whose `total_variation` holds the gap of mean log-likelihoods."""
    for name, r in tests:
        what, gap = ("U", "mean log-likelihood gap") if name == "loglik" else ("chi-square", "empirical TV")
        print(f"  {name:<8} {what} = {r.statistic:8.2f}  dof = {r.dof:3d}  p = {r.p_value:.4f}  "
              f"({gap} {r.total_variation:.3f})")
    combined = bonferroni(tests)
    passed = combined >= level
    print(f"combined p-value = {combined:.4f} -> {'PASS' if passed else 'FAIL'} (level {level})")
    return passed


def calibration(seeds: int = 200, n: int = 400, level: float = 0.05) -> tuple[float, float, float]:
    """The tests' behaviour when both samplers share one law: `seeds` pairs of n 3-token sequences from a peaked
    Markov chain with a long tail of rare tokens. Returns (the per-position test's alarm rate at `level`, the
    Kolmogorov-Smirnov p-value of its p-values against uniform, the combined audit's alarm rate at `level`)."""
    from scipy.stats import kstest
    rng = np.random.default_rng(0)
    first = np.r_[[0.4, 0.25, 0.15, 0.1], np.full(50, 0.1 / 50)]
    step = rng.dirichlet(np.full(len(first), 0.3), size=len(first))           # next-token law per token

    def sample(seed):
        r = np.random.default_rng(seed)
        seqs = r.choice(len(first), size=(n, 1), p=first).tolist()
        for s in seqs:
            for _ in range(2):
                s.append(int(r.choice(len(first), p=step[s[-1]])))
        return [tuple(s) for s in seqs]
    pvals, alarms = [], 0
    for seed in range(seeds):
        a, b = sample(2 * seed + 1), sample(2 * seed + 2)
        pvals.append(homogeneity_test(Counter(s[1] for s in a), Counter(s[1] for s in b)).p_value)
        alarms += audit_tests(a, b, level, skip=0)[1] < level
    pvals = np.array(pvals)
    return float((pvals < level).mean()), float(kstest(pvals, "uniform").pvalue), alarms / seeds


def cmd_audit(args) -> int:
    from tqdm import tqdm

    from dataclasses import replace

    from .api import Target, make_engine
    from .flags import check_decoding_flags
    from .engine import Engine, GenerationConfig
    from .sampling import SamplingConfig
    check_decoding_flags(args)
    if args.reference_url:
        raise VerispecError("--reference-url goes with --url (the endpoint to audit against it)")
    if args.samples < 10 or args.tokens < 1:
        raise VerispecError("audit needs --samples >= 10 and --tokens >= 1")
    if args.method == "plain":
        raise VerispecError("audit compares a speculative method with plain sampling; pick ngram, draft, "
                            "draft-tree, medusa or eagle")
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
    plain = Engine(target.model)
    spec = make_engine(args.method, target, args.draft, args.ngram_max, args.tree)
    cfg = GenerationConfig(max_new_tokens=args.tokens + 1, k=args.k, k_max=args.k_max, seed=args.seed,
                           acceptance=args.acceptance,
                           sampling=SamplingConfig(args.temperature, args.top_k, args.top_p),
                           stop_token_ids=target.tokenizer.stop_token_ids)
    ids = target.tokenizer.prompt_ids(args.prompt, not args.no_chat)
    with tqdm(total=2 * args.samples, desc="audit", unit="sample", file=sys.stderr) as bar:
        a, _, _ = sample_sequences(plain, ids, replace(cfg, acceptance="exact"), args.samples, args.seed, bar,
                                   args.batch)
        b, drafted, accepted = sample_sequences(spec, ids, cfg, args.samples, args.seed + SEED_OFFSET, bar,
                                                args.batch)
    if drafted == 0:
        raise VerispecError(f"{args.method} drafted nothing on this prompt, so the audit cannot test it; "
                            "try a prompt whose answer repeats its input, or more --tokens")
    tests, _ = audit_tests(a, b, args.level)
    if all(r.dof == 0 for _, r in tests) and a != b:
        raise VerispecError("the audit has no power here: the outcomes are so spread that every one is too rare to "
                            "test (all pooled into one cell); lower --temperature, test fewer --tokens or take "
                            "more --samples")
    lossy = " (typical acceptance: LOSSY, a FAIL is expected; the TVs measure how far it is)" \
        if args.acceptance == "typical" else ""
    print(f"audit {args.method}{lossy} vs plain: {args.samples} samples each of tokens 2..{args.tokens + 1} "
          "(token 1 comes from the prefill), "
          f"T={args.temperature}, top-p={args.top_p}, top-k={args.top_k}, k={args.k}")
    print(f"  {args.method} drafted {drafted} tokens and accepted {accepted} across its runs")
    return 0 if print_verdict(tests, args.level) else 1
