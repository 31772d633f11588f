"""`verispec report` end to end on a tiny random model: tables, plots and JSON all written and consistent."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from verispec.cli import main
from verispec.report import random_prompts


def test_report_end_to_end(tmp_path, tiny_dir, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": f"Repeat: a b c a b c {i}", "category": c})
                                 for i, c in enumerate(["x", "y"])))
    out = tmp_path / "report"
    assert main(["report", "--prompts", str(prompts), "--model", str(tiny_dir), "--methods", "ngram",
                 "--k", "1,2", "--temperatures", "0,1", "--adversarial", "2", "--limit", "1",
                 "--max-new-tokens", "6", "--repeats", "1", "--out", str(out)]) == 0
    figures = json.loads((out / "report.json").read_text())
    assert set(figures) >= {"meta", "cost_curve", "tree_curve", "draft_cost", "k_sweep", "grid", "adversarial"}
    sweep = figures["k_sweep"]["methods"]["ngram"]
    assert [r["k"] for r in sweep["rows"]] == [1, 2, "auto"]
    assert all(r["predicted_speedup"] > 0 for r in sweep["rows"][:2])
    assert sweep["rows"][0]["greedy_match_rate"] == 1.0
    assert set(figures["grid"]) == {"0.0", "1.0"}
    methods = {r["method"] for r in figures["grid"]["0.0"]}
    assert {"plain", "ngram", "hf-plain", "hf-ngram"} <= methods          # transformers is a test dependency
    assert {r["method"] for r in figures["adversarial"]} == {"plain", "ngram"}
    md = (out / "report.md").read_text()
    for heading in ("Headline", "Speedup against k", "Correlated acceptances", "By category and temperature",
                    "Never slower", "Cost", "Plots"):
        assert f"## {heading}" in md
    for png in ("speedup_vs_k.png", "alpha_by_position.png", "acceptance_histogram.png",
                "speedup_by_category.png", "cost_curve.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in md
    # a report folder is written anew only with --force, and a folder of the user's never (it replaced their
    # report.md): both refused before any work
    capsys.readouterr()
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "report.md").write_text("my notes")
    for folder, force, needle in ((out, [], "pass --force"), (mine, [], "pass --force"),
                                  (mine, ["--force"], "holds no report verispec wrote")):
        assert main(["report", "--prompts", str(prompts), "--model", str(tiny_dir), "--methods", "ngram",
                     "--out", str(folder), *force]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1
    assert (mine / "report.md").read_text() == "my notes"
    from verispec.report import check_report_folder
    check_report_folder(out, True)          # an earlier report, this one or the shipped bench/report: replaceable
    check_report_folder(Path(__file__).parent.parent / "bench" / "report", True)


def test_report_rejects_bad_flags(capsys, tiny_dir, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hi"}))
    for flags, needle in ((["--temperatures", "hot"], "--temperatures"), (["--k", "2,auto"], "auto is always"),
                          (["--methods", "plain"], "at least one speculative method")):
        assert main(["report", "--prompts", str(prompts), "--model", str(tiny_dir), "--out",
                     str(tmp_path / "r"), *flags]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1


def test_random_prompts_are_seeded_and_free_of_stop_tokens(tiny_dir):
    from verispec.model.tokenizer import Tokenizer
    tok = Tokenizer(tiny_dir, [2])
    a, b = random_prompts(tok, 3, seed=1), random_prompts(tok, 3, seed=1)
    assert a == b and len({p.prompt for p in a}) == 3
    assert all(2 not in tok.encode(p.prompt) for p in a)


def test_profile_writes_a_profile_that_auto_k_reads(tmp_path, tiny_dir):
    from verispec.autok import CostProfile
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Repeat: a b c a b c", "category": "x"}))
    out, figures = tmp_path / "profile.json", tmp_path / "figures.json"
    assert main(["profile", "--prompts", str(prompts), "--model", str(tiny_dir), "--methods", "ngram",
                 "--limit", "1", "--repeats", "1", "--max-new-tokens", "6", "--out", str(out),
                 "--json", str(figures)]) == 0
    p = CostProfile.load(out)
    assert p.measured and set(p.draft_cost) == {"ngram"} and p.curve[1] == 1.0 and len(p.curve) == 16
    assert 0 <= p.alpha["ngram"] <= 1
    report = json.loads(figures.read_text())["methods"]["ngram"]
    assert report["predicted_speedup"] > 0 and report["explanation"]
    p.batch_curve, p.batch_scale = {4: {1: 1.0, 2: 1.5}}, {4: 1.2}      # as `cost-curve --batch` leaves them
    p.draft_cost["draft"], p.alpha["draft"] = 0.1, 0.6                   # as an earlier run left them
    p.save(out)
    assert main(["profile", "--prompts", str(prompts), "--model", str(tiny_dir), "--methods", "ngram",
                 "--limit", "1", "--repeats", "1", "--max-new-tokens", "6", "--out", str(out)]) == 0
    again = CostProfile.load(out)
    assert again.batch_scale == {4: 1.2} and again.batch_curve[4][2] == 1.5     # re-profiling keeps them,
    assert again.alpha["draft"] == 0.6 and again.draft_cost["draft"] == 0.1      # and methods it did not run


def test_profile_refuses_before_measuring_a_file_it_would_merge_wrongly(tmp_path, tiny_dir, capsys, monkeypatch):
    """--out naming another model's (or dtype's) profile, or a file that is no profile, is refused in one line
    before any measuring: the merge would keep the other model's figures."""
    import verispec.profile as profile
    from verispec.autok import CostProfile
    monkeypatch.setattr(profile, "cost_curve", lambda *a, **kw: 1 / 0)     # measuring would fail loudly
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "Repeat: a b c a b c", "category": "x"}))
    other, junk = tmp_path / "other.json", tmp_path / "junk.json"
    CostProfile(curve={1: 1.0}, draft_cost={"ngram": 0.1}, alpha={"ngram": 0.5}, measured=True,
                meta={"model": "/somewhere/SmolLM2-135M-Instruct", "dtype": "bf16", "device": "cpu"}).save(other)
    junk.write_text("[1, 2]")
    for path, needle in ((other, "is the profile of SmolLM2-135M-Instruct in bf16"), (junk, "cannot read profile")):
        before = path.read_text()
        assert main(["profile", "--prompts", str(prompts), "--model", str(tiny_dir), "--methods", "ngram",
                     "--dtype", "fp32", "--limit", "1", "--out", str(path)]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1 and path.read_text() == before


def test_a_shipped_profile_takes_this_machines_draft_cost(target_bf16, tmp_path, monkeypatch):
    """A draft's c is the ratio of two models' passes and differs by machine: with the shipped profile, a draft
    model's engine gets c measured here once (cached: the second engine reads it back); a profile the user measured
    (`verispec profile`) is kept as it is, and proposers without a draft model are left alone."""
    from verispec.api import engine_profile, make_proposer
    from verispec.autok import CostProfile
    shipped = target_bf16.profile()                     # the shipped profile, this machine's verify costs (cached)
    assert "verify_costs" in shipped.meta
    monkeypatch.setenv("VERISPEC_HOME", str(tmp_path))
    draft = make_proposer("draft", target_bf16)
    tuned = engine_profile(target_bf16, draft, profile=shipped)
    assert "draft_cost" in tuned.meta and 0 < tuned.draft_cost["draft"] < 1
    cached = list((tmp_path / "profiles").glob("draft-*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text())["draft"] == tuned.draft_cost["draft"]
    cached[0].write_text(json.dumps({"draft": 0.123}))
    tree = make_proposer("draft-tree", target_bf16)
    assert engine_profile(target_bf16, tree, profile=shipped).draft_cost["draft"] == 0.123
    own = CostProfile(draft_cost={"draft": 0.3}, measured=True)
    assert engine_profile(target_bf16, draft, profile=own).draft_cost["draft"] == 0.3
    ngram = make_proposer("ngram", target_bf16)
    assert engine_profile(target_bf16, ngram, profile=shipped).draft_cost == shipped.draft_cost


def test_heads_static_trees_take_this_machines_cost_per_cycle_and_their_size_follows_it(target_bf16, tmp_path,
                                                                                         monkeypatch):
    """Medusa's and EAGLE's static trees get c per cycle measured here (one whole tree, cached per tree shape),
    and `--tree auto` sizes the tree again with it, as `--tree dynamic` sizes EAGLE's dynamic tree: the default
    model's EAGLE head costs 0.07 of a pass on an AMX Xeon and 0.26 on an AVX2-only CPU, and the best size turns
    on it."""
    from dataclasses import replace

    from verispec import profile as profile_mod
    from verispec.api import engine_profile, make_proposer
    shipped = target_bf16.profile()
    monkeypatch.setenv("VERISPEC_HOME", str(tmp_path))
    for method in ("eagle", "medusa"):
        four, eight = make_proposer(method, target_bf16, tree="4"), make_proposer(method, target_bf16, tree="8")
        c4 = engine_profile(target_bf16, four, profile=shipped).draft_cost[method]
        c8 = engine_profile(target_bf16, eight, profile=shipped).draft_cost[method]
        assert 0 < c4 < 1 and 0 < c8 < 1
    assert len(list((tmp_path / "profiles").glob("draft-*.json"))) == 4          # one per method and tree
    sizes = {}
    for c in (0.001, 20.0):                   # heads nearly free: a small tree; heads dearer than 16 passes: bigger
        monkeypatch.setattr(profile_mod, "machine_draft_cost",
                            lambda t, p, base, d, c=c: replace(base, draft_cost={**base.draft_cost, p.name: c}))
        sizes[c] = (make_proposer("eagle", target_bf16, tree="auto").tree.size,
                    make_proposer("eagle", target_bf16, tree="dynamic").nodes)      # a dynamic tree's too
    assert sizes[0.001][0] < sizes[20.0][0] and sizes[0.001][1] < sizes[20.0][1], sizes


def test_a_users_profile_of_eagles_chain_is_not_read_as_a_trees_cost_per_cycle(target_bf16, monkeypatch):
    """`verispec profile` times EAGLE as a chain, so its profile holds c per drafted token; a static or dynamic
    EAGLE tree's gate needs a whole cycle's. Such a tree gets its cycle measured here (cached per tree shape);
    Medusa's profiled c, already per cycle, and the chain's are kept as the user measured them."""
    from dataclasses import replace

    from verispec import profile as profile_mod
    from verispec.api import engine_profile, make_proposer
    from verispec.autok import CostProfile
    monkeypatch.setattr(profile_mod, "machine_draft_cost",
                        lambda t, p, base, d: replace(base, draft_cost={**base.draft_cost, p.name: 0.5}))
    own = CostProfile(draft_cost={"eagle": 0.01, "medusa": 0.2}, measured=True)
    for tree in ("4", "dynamic"):
        assert engine_profile(target_bf16, make_proposer("eagle", target_bf16, tree=tree),
                              profile=own).draft_cost["eagle"] == 0.5
    assert engine_profile(target_bf16, make_proposer("eagle", target_bf16), profile=own).draft_cost["eagle"] == 0.01
    medusa = make_proposer("medusa", target_bf16, tree="4")
    assert engine_profile(target_bf16, medusa, profile=own).draft_cost["medusa"] == 0.2


def test_a_drafts_cost_is_the_median_of_each_rounds_ratio_to_the_target_pass(monkeypatch):
    """c is timed against the target's pass in the same rounds: a VM that slows down halfway through slows both,
    and each round's ratio stays put (timed apart, the second half's pass would be divided into the first half's
    drafting). A fake clock stands in for the VM."""
    from types import SimpleNamespace

    import pytest

    from verispec import profile
    from verispec.proposers.base import Proposal
    now, slow = [0.0], [1.0]
    monkeypatch.setattr(profile, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    class Stub:
        reads_features = False

        def prepare(self, capacity):
            pass

        def propose(self, context, k, sampling, generator):
            now[0] += 0.004 * k * slow[0]
            return Proposal([])

    def step():
        now[0] += 0.01 * slow[0]
        slow[0] = 3.0                                  # from the first round on, everything runs 3x slower
    engine = SimpleNamespace(proposer=Stub(), static_tree=None, target=None)
    assert profile.draft_cost(engine, [1, 2, 3], k=4, repeats=6, per_step=step) == pytest.approx(0.4)


def test_a_disturbed_measurement_of_verify_costs_is_taken_twice_more_and_each_shape_gets_its_median(
        target_bf16, tmp_path, monkeypatch):
    """One measurement on a busy VM gave the Qwen 1.5B 3 rows at 1.70 passes and 4 at 1.44; kept, it sized EAGLE's
    tree for rows 23% dearer than they are. A measurement where more rows come out cheaper than fewer (beyond 10%)
    is repeated twice, and the cache holds each shape's median of the three; a steady one is taken once."""
    from verispec import kernels
    from verispec import profile as profile_mod
    from verispec.autok import CostProfile
    built = kernels.build_dir()
    monkeypatch.setattr(kernels, "build_dir", lambda: built)      # the kernels built already, not a new home's
    noisy = ({1: 1.0, 2: 1.25, 3: 1.70, 4: 1.44}, {4: 2.86, 8: 2.50})
    calm = [({1: 1.0, 2: 1.19, 3: 1.38, 4: 1.64}, {4: 1.96, 8: 3.25}),
            ({1: 1.0, 2: 1.21, 3: 1.40, 4: 1.60}, {4: 2.00, 8: 3.30})]
    assert not profile_mod.steady(*noisy) and all(profile_mod.steady(*m) for m in calm)
    for first, calls, expected in ((noisy, 3, {3: 1.40, 4: 1.60}), (calm[0], 1, {3: 1.38, 4: 1.64})):
        made = iter([first, *calm])
        seen = []
        monkeypatch.setattr(profile_mod, "verify_times", lambda *a, **k: seen.append(1) or next(made))
        monkeypatch.setenv("VERISPEC_HOME", str(tmp_path / str(calls)))
        tuned = profile_mod.machine_costs(target_bf16.model, CostProfile(), "m", "bf16")
        assert len(seen) == calls and {n: tuned.curve[n] for n in (3, 4)} == expected



def test_a_damaged_cost_cache_is_measured_again_and_a_bad_profile_gets_one_line(target_bf16, tmp_path, monkeypatch):
    """The machine's cached verify costs are measured again where the file is damaged (valid JSON of another
    shape: it crashed `generate` before); a user's profile with wrongly shaped or out-of-range fields is refused in
    one line naming the field, not with a traceback from deep in auto k."""
    from verispec import kernels
    from verispec import profile as profile_mod
    from verispec.autok import CostProfile
    from verispec.errors import VerispecError
    built = kernels.build_dir()
    monkeypatch.setattr(kernels, "build_dir", lambda: built)
    measured = ({1: 1.0, 2: 1.2, 3: 1.4}, {4: 2.0, 8: 3.0})
    monkeypatch.setattr(profile_mod, "verify_times", lambda *a, **k: measured)
    monkeypatch.setenv("VERISPEC_HOME", str(tmp_path))
    profile_mod.machine_costs(target_bf16.model, CostProfile(), "m", "bf16")
    cache, = (tmp_path / "profiles").glob("verify-*.json")
    for damaged in ("{}", "[]", '{"curve": [], "tree_curve": {}}', '{"curve": {"1": "x"}, "tree_curve": {}}',
                    '{"curve": {}, "tree_curve": {}}', '{"curve": {"1": NaN}, "tree_curve": {}}'):
        cache.write_text(damaged)
        tuned = profile_mod.machine_costs(target_bf16.model, CostProfile(), "m", "bf16")
        assert tuned.curve[3] == 1.4 and tuned.tree_cost(8) == 3.0, damaged
    good = json.loads(json.dumps({"curve": {"1": 1.0, "2": 1.1}, "draft_cost": {"ngram": 0.01},
                                  "alpha": {"ngram": 0.5}}))
    path = tmp_path / "p.json"
    path.write_text(json.dumps(good))
    assert CostProfile.load(path).alpha == {"ngram": 0.5}
    path.write_text(json.dumps({**good, "batch_curve": {"4": {"1": 1.0, "2": 1.5}}, "batch_scale": {"4": 1.2}}))
    assert CostProfile.load(path).batch_costs("ngram", 4)[1] == {1: 1.0, 2: 1.5}    # as cost-curve --batch writes
    for field, value in (("curve", {}), ("draft_cost", {"ngram": "x"}), ("alpha", {"ngram": "x"}),
                         ("alpha", {"ngram": 5.0}), ("alpha", [1]), ("draft_cost", None), ("curve", {"0": 1.0}),
                         ("curve", {"1": -1.0}), ("tree_curve", {"4": True}), ("meta", []), ("curve", {"2": 1.1}),
                         ("curve", {"1": float("inf")}), ("curve", {"1.0": 1.0}), ("measured", "false"),
                         ("batch_curve", {"4": {"1": 1.0, "2": 1.5}}), ("batch_scale", {"4": 0})):
        path.write_text(json.dumps({**good, field: value}))
        with pytest.raises(VerispecError, match="cannot read profile"):
            CostProfile.load(path)
