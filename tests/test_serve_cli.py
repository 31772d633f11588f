"""The serving commands on a tiny random model: bench-batch, loadtest, cost-curve --batch, and bad flags."""
import json

from verispec.autok import CostProfile
from verispec.cli import main


def prompts_file(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("\n".join(json.dumps({"prompt": f"Repeat after me: a b c a b c {i}", "category": c})
                           for i, c in enumerate(["x", "y", "x", "y"])))
    return p


def test_bench_batch_reports_each_batch_size(tmp_path, tiny_dir, capsys):
    out = tmp_path / "b.json"
    assert main(["bench-batch", "--prompts", str(prompts_file(tmp_path)), "--model", str(tiny_dir), "--batch",
                 "1,3", "--max-new-tokens", "8", "--repeats", "1", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["batch"] for r in rows] == [1, 3]
    assert all(r["plain_tok_s"] > 0 and r["new_tokens"] > 0 for r in rows)
    assert "speedup" in capsys.readouterr().out


def test_cost_curve_batch_saves_batch_curves_into_a_profile(tmp_path, tiny_dir):
    profile = tmp_path / "profile.json"
    assert main(["cost-curve", "--model", str(tiny_dir), "--max-n", "3", "--context", "16", "--repeats", "1",
                 "--batch", "1,2", "--profile", str(profile)]) == 0
    loaded = CostProfile.load(profile)
    assert set(loaded.batch_curve) == {1, 2} and set(loaded.batch_curve[2]) == {1, 2, 3}
    assert loaded.batch_curve[2][1] == 1.0 and loaded.batch_scale[1] > 0
    c, curve = loaded.batch_costs("ngram", 2)
    assert curve == loaded.batch_curve[2]


def test_loadtest_starts_a_loopback_server_and_reports_zero_errors(tmp_path, tiny_dir):
    out = tmp_path / "load.json"
    assert main(["loadtest", "--model", str(tiny_dir), "--clients", "3", "--duration", "1.5", "--max-tokens", "6",
                 "--prompts", str(prompts_file(tmp_path)), "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["method"] for r in rows] == ["plain", "ngram"]
    for r in rows:
        assert r["errors"] == 0 and r["requests"] >= 3 and r["tokens_per_s"] > 0
        assert 0 < r["latency_p50_s"] <= r["latency_p99_s"]


def test_serving_commands_reject_bad_flags_in_one_line(tmp_path, tiny_dir, capsys):
    assert main(["serve", "--model", str(tiny_dir), "--max-batch", "0"]) == 2
    assert "--max-batch" in capsys.readouterr().err
    assert main(["serve", "--model", str(tiny_dir), "--method", "bogus", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown speculative method" in err
    assert main(["serve", "--model", str(tiny_dir), "--method", "ngram", "--tree", "3,2", "--port", "0"]) == 2
    assert "ngram" in capsys.readouterr().err
    assert main(["bench-batch", "--prompts", str(prompts_file(tmp_path)), "--batch", "two"]) == 2
    assert "--batch" in capsys.readouterr().err
    assert main(["loadtest", "--clients", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--clients" in err
    assert main(["loadtest", "--url", "http://127.0.0.1:9", "--duration", "1"]) == 2
    assert "no verispec server answers" in capsys.readouterr().err


def test_serve_limits_and_access_flags_are_checked_before_the_model_loads(monkeypatch, capsys):
    from verispec.cli import build_parser
    for flags, word in ((["--max-tokens", "0"], "--max-tokens"), (["--max-waiting", "0"], "--max-waiting"),
                        (["--kv-cache-mb", "0"], "--kv-cache-mb"), (["--kv-cache-mb", "nan"], "--kv-cache-mb"),
                        (["--prefix-cache-mb", "-1"], "--prefix-cache-mb"),
                        (["--prefix-cache-mb", "nan"], "--prefix-cache-mb"),
                        (["--max-body-bytes", "0"], "--max-body-bytes"),
                        (["--allowed-methods", "plain,telepathy"], "telepathy"),
                        (["--api-key", ""], "--api-key (or $VERISPEC_API_KEY) is empty"),
                        (["--api-key", "  "], "is empty")):
        assert main(["serve", "--model", "/nonexistent", *flags]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and word in err, err
    monkeypatch.setenv("VERISPEC_API_KEY", "from-env")
    assert build_parser().parse_args(["serve"]).api_key == "from-env"
    assert build_parser().parse_args(["serve", "--api-key", "flag"]).api_key == "flag"
    monkeypatch.delenv("VERISPEC_API_KEY")
    args = build_parser().parse_args(["serve"])
    assert args.api_key is None and args.prefill_chunk == 64 and args.allowed_methods is None
    assert args.prefix_cache_mb == 1024


def test_loadtest_refuses_a_duration_that_never_ends_or_is_no_number(capsys):
    for duration in ("inf", "nan", "0"):
        assert main(["loadtest", "--url", "http://127.0.0.1:9", "--duration", duration]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "--duration in (0, 86400]" in err, err


def test_loadtest_faults_needs_its_own_server(capsys):
    assert main(["loadtest", "--faults", "--url", "http://127.0.0.1:9"]) == 2
    assert "--faults runs its own server" in capsys.readouterr().err
