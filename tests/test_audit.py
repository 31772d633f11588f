"""The audit: its homogeneity test on known samples, and end to end on the real model, passing and failing."""
from collections import Counter

import torch

import verispec.engine
from verispec.audit import homogeneity_test
from verispec.cli import main


def draws(probabilities, n, seed):
    g = torch.Generator().manual_seed(seed)
    idx = torch.multinomial(torch.tensor(probabilities), n, replacement=True, generator=g)
    return Counter(idx.tolist())


def test_same_distribution_passes_and_different_fails():
    p = [0.4, 0.3, 0.2, 0.05, 0.03, 0.02]
    passes = sum(homogeneity_test(draws(p, 2000, s), draws(p, 2000, s + 100)).passed for s in range(20))
    assert passes >= 17                          # level 0.01: about 1 in 100 false alarms
    biased = [0.5, 0.25, 0.15, 0.05, 0.03, 0.02]
    assert not homogeneity_test(draws(p, 2000, 1), draws(biased, 2000, 2)).passed


def test_rare_outcomes_are_pooled_not_dropped():
    a = Counter({("x",): 50, ("y",): 50, **{(f"r{i}",): 1 for i in range(30)}})
    b = Counter({("x",): 52, ("y",): 48, **{(f"s{i}",): 1 for i in range(30)}})
    r = homogeneity_test(a, b)
    assert r.cells == 3 and r.passed


AUDIT = ["audit", "--method", "draft", "--samples", "60", "--tokens", "3", "--dtype", "fp32", "--k", "3"]


def test_audit_passes_on_the_real_model(capsys, truncated_draft_dir):
    code = main(AUDIT + ["--draft", str(truncated_draft_dir)])
    out = capsys.readouterr().out
    assert code == 0 and "PASS" in out and "p-value" in out


def test_audit_fails_a_planted_bias(capsys, truncated_draft_dir, monkeypatch):
    honest = verispec.engine.verify_chain

    def argmax_when_drafting(p, q, draft, u_accept, u_final, num_draft=None):
        if draft.shape[1] == 0:                    # plain decoding's steps stay honest
            return honest(p, q, draft, u_accept, u_final, num_draft)
        n = torch.zeros(p.shape[0], dtype=torch.long)
        return n, p[:, 0].argmax(-1)               # greedy in disguise: wrong at temperature 1
    monkeypatch.setattr(verispec.engine, "verify_chain", argmax_when_drafting)
    code = main(AUDIT + ["--draft", str(truncated_draft_dir)])
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out


def test_audit_refuses_to_pass_when_nothing_was_drafted(capsys, tiny_dir):
    code = main(["audit", "--model", str(tiny_dir), "--method", "ngram", "--samples", "10", "--tokens", "1"])
    assert code == 2 and "drafted nothing" in capsys.readouterr().err


def test_false_positive_rate_and_uniform_p_values_over_200_seeds():
    """Two samplers with one law, 200 seeds: the chi-square p-values are close to uniform (so a level-0.05 test
    alarms about 5% of the time) and the audit's combined test alarms at most at its level."""
    from verispec.audit import calibration
    fp_rate, ks_p, combined = calibration(seeds=200)
    assert 0.02 <= fp_rate <= 0.09, fp_rate
    assert ks_p > 0.01, ks_p
    assert combined <= 0.07, combined


def test_packed_runs_sample_what_each_run_samples_alone(target_bf16):
    """The audit's runs go `--batch` at a time through packed passes, from one shared prefill of the prompt; each
    run's tokens are those of the same seed generated alone (EAGLE's tree with the n-gram path, at T = 1; 12 runs,
    5 at a time, so runs join while others are still going)."""
    from dataclasses import replace

    from verispec.api import make_engine
    from verispec.audit import sample_sequences
    from verispec.engine import Engine, GenerationConfig
    from verispec.sampling import SamplingConfig

    class Bar:
        def update(self, n):
            pass
    tok = target_bf16.tokenizer
    ids = tok.prompt_ids("the cat sat on the mat. " * 3 + "the cat sat on", False)
    cfg = GenerationConfig(max_new_tokens=5, k=3, sampling=SamplingConfig(1.0), stop_token_ids=tok.stop_token_ids)
    for engine in (Engine(target_bf16.model), make_engine("eagle", target_bf16, tree="dynamic+ngram")):
        packed, drafted, _ = sample_sequences(engine, ids, cfg, 12, 7, Bar(), batch=5)
        alone = [engine.generate(ids, replace(cfg, seed=7 + i)).token_ids for i in range(12)]
        assert packed == [tuple(a) + ("<stop>",) * (5 - len(a)) for a in alone]
        assert len(set(packed)) > 6 and (engine.proposer is None or drafted > 0)


def test_a_reused_prefix_leaves_eagle_every_prompt_feature(target_bf16):
    """`Engine.generate(reuse_prefix=True)` runs only the new prompt positions, and EAGLE's head drafts from every
    position's features: a reused prefix's are the ones kept by the run before (none kept: the prefix is not
    reused), so a seeded run at T = 1 samples what it samples afresh (it did not, once: the head drafted from the
    last prompt token's feature alone)."""
    from dataclasses import replace

    from verispec.api import make_engine
    from verispec.engine import GenerationConfig
    from verispec.sampling import SamplingConfig
    tok = target_bf16.tokenizer
    ids = tok.prompt_ids("the cat sat on the mat. " * 3 + "the cat sat on", False)
    cfg = GenerationConfig(max_new_tokens=5, k=3, sampling=SamplingConfig(1.0), stop_token_ids=tok.stop_token_ids)
    engine = make_engine("eagle", target_bf16)
    for seed in range(1001, 1005):
        fresh = engine.generate(ids, replace(cfg, seed=seed)).token_ids
        assert engine.generate(ids, replace(cfg, seed=seed), reuse_prefix=True).token_ids == fresh   # none kept
        assert engine.features is not None
        assert engine.generate(ids, replace(cfg, seed=seed), reuse_prefix=True).token_ids == fresh   # reused
