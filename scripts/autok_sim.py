"""Simulated auto k for a draft: decoding speed relative to plain (target steps saved), per acceptance pattern.

    python scripts/autok_sim.py [PROFILE.json] [--method draft] [--c C] [--tokens 48] [--runs 300]

Runs `autok.AutoK` with a profile's c, cost curve and prior alpha against Bernoulli acceptances (each drafted token
accepted with the pattern's probability at its position in the answer), charging each cycle k c + T(k+1)/T(1) and
an idle draft's catch-up c T(behind)/T(1), as the cost model does. Policies: "auto" (as shipped), "probe_prior"
(probes draft the k the prior alpha would choose instead of 1), "fixed3" (k = 3 always), "relax" (each plain cycle
pulls the estimate 5% of the way back to the prior: evidence fades with the text, not only with drafted cycles).
--c replaces the profile's c (e.g. the one measured on this machine). Prints the mean over `--runs` seeds of tokens
per target step.
"""
import argparse
import random
import statistics

from verispec.autok import AutoK, CostProfile
from verispec.theory import best_k, cost_ratio

PATTERNS = {"hard start, then 0.95": lambda i: 0.3 if i < 2 else 0.95, "steady 0.93": lambda i: 0.93,
            "4 rejected, then 0.6": lambda i: 0.0 if i < 4 else 0.6, "steady 0.75": lambda i: 0.75,
            "steady 0.4": lambda i: 0.4, "adversarial 0.26": lambda i: 0.26, "adversarial 0.1": lambda i: 0.1}
POLICIES = ("auto", "probe_prior", "fixed3", "relax")
RELAX = 0.95


def run(profile, method, alpha_at, policy, tokens, seed):
    rng = random.Random(seed)
    c, curve, prior = profile.draft_cost[method], profile.curve, profile.alpha[method]
    auto = None if policy == "fixed3" else AutoK(c, curve, prior, k_max=12)
    out, cost, behind = 0, 0.0, 0
    while out < tokens:
        k = 3 if auto is None else auto.next_k(behind)
        if policy == "probe_prior" and k > 0 and auto.idle == -1:      # this cycle is a probe
            k = max(1, best_k(prior, c, curve, 12))
        if k == 0:
            out, cost, behind = out + 1, cost + 1, behind + 1
            if policy == "relax":
                weight = auto.accepted + auto.rejected
                auto.accepted = RELAX * auto.accepted + (1 - RELAX) * prior * weight
                auto.rejected = RELAX * auto.rejected + (1 - RELAX) * (1 - prior) * weight
            continue
        cost += (c * cost_ratio(curve, behind) if behind > 1 else 0) + k * c + cost_ratio(curve, k + 1)
        behind, accepted = 0, 0
        while accepted < k and rng.random() < alpha_at(out + accepted):
            accepted += 1
        out += accepted + 1
        if auto is not None:
            auto.update(min(accepted + 1, k), accepted)
    return out / cost


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("profile", nargs="?", default="verispec/profiles/qwen2.5-coder-1.5b-gguf-q8-cpu.json")
    ap.add_argument("--method", default="draft")
    ap.add_argument("--c", type=float, default=None)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--runs", type=int, default=300)
    args = ap.parse_args()
    profile = CostProfile.load(args.profile)
    if args.c is not None:
        profile.draft_cost[args.method] = args.c
    print(f"{args.profile}: c {profile.draft_cost[args.method]:.3f}, prior alpha {profile.alpha[args.method]:.3f}")
    for name, alpha_at in PATTERNS.items():
        res = {p: statistics.mean(run(profile, args.method, alpha_at, p, args.tokens, s) for s in range(args.runs))
               for p in POLICIES}
        print(f"{name:24s} " + "  ".join(f"{p} {v:.3f}" for p, v in res.items()))


if __name__ == "__main__":
    main()
