"""The command line: bad input gets one line on stderr and exit status 2; good input works end to end."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import write_model_folder
from verispec.cli import main
from verispec.model.llama import LlamaConfig


def fails_cleanly(capsys, argv, needle):
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("verispec: error:"), err
    assert needle in lines[0], lines[0]
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def other_vocab_dir(tmp_path_factory):
    cfg = LlamaConfig(vocab_size=1000, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                      num_kv_heads=1, max_position=256)
    return write_model_folder(tmp_path_factory.mktemp("othervocab"), cfg, None)


@pytest.fixture(scope="module")
def corrupt_files(tmp_path_factory, tiny_dir):
    root = tmp_path_factory.mktemp("corrupt")
    gguf = root / "bad.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00garbage" * 10)
    folder = root / "badfolder"
    folder.mkdir()
    (folder / "config.json").write_text((tiny_dir / "config.json").read_text())
    (folder / "model.safetensors").write_bytes(b"not a safetensors file")
    badcfg = root / "badcfg"
    badcfg.mkdir()
    (badcfg / "config.json").write_text("{not json")
    (badcfg / "model.safetensors").write_bytes((tiny_dir / "model.safetensors").read_bytes())
    prompts_bad = root / "bad.jsonl"
    prompts_bad.write_text('{"prompt": "ok"}\n{"prompt": \n')
    prompts_nofield = root / "nofield.jsonl"
    prompts_nofield.write_text('{"text": "hello"}\n')
    return {"gguf": gguf, "folder": folder, "badcfg": badcfg, "bad_jsonl": prompts_bad, "nofield": prompts_nofield,
            "dir": root}


@pytest.mark.parametrize("flags,needle", [
    (["--k", "0"], "k must be >= 1"),
    (["--k", "-3"], "k must be >= 1"),
    (["--temperature", "-0.5"], "temperature must be >= 0"),
    (["--top-p", "0"], "top-p must be in (0, 1]"),
    (["--top-p", "1.5"], "top-p must be in (0, 1]"),
    (["--top-k", "-1"], "top-k must be >= 0"),
    (["--max-new-tokens", "0"], "max-new-tokens must be >= 1"),
    (["--dtype", "fp64"], "invalid choice"),
    (["--k", "two"], "k must be an integer >= 1 or 'auto'"),
    (["--k", "0"], "k must be >= 1 or 'auto'"),
    (["--k-max", "0"], "k-max must be >= 1"),
    (["--k-max", "400"], "too large"),
])
def test_bad_decoding_flags(capsys, tiny_dir, flags, needle):
    fails_cleanly(capsys, ["generate", "hello", "--model", str(tiny_dir), *flags], needle)


DEV_PROMPTS = str(Path(__file__).parent.parent / "bench" / "dev_prompts.jsonl")


@pytest.mark.parametrize("argv,needle", [
    (["generate", "hi", "--seed", "99999999999999999999999"], "--seed: must be below 2^63"),
    (["generate", "hi", "--seed", "-1"], "--seed: must be an integer >= 0"),
    (["generate", "hi", "--device", "tpu"], "--device: must be auto, cpu, cuda or cuda:N"),
    (["generate", "hi", "--ngram-max", "0"], "--ngram-max: must be an integer >= 1"),
    (["generate", "hi", "--method", "plain", "--draft", "x"], "--draft is for --method draft"),
    (["bench", "--prompts", DEV_PROMPTS, "--limit", "0"], "--limit: must be an integer >= 1"),
    (["bench", "--prompts", DEV_PROMPTS, "--methods", ""], "--methods is empty"),
    (["bench", "--prompts", DEV_PROMPTS, "--json", ""], "name a file to write"),
    (["profile", "--prompts", DEV_PROMPTS, "--context", "0"], "--context: must be an integer >= 1"),
    (["report", "--prompts", DEV_PROMPTS, "--out", "r", "--adversarial", "-1"], "--adversarial: must be an integer"),
    (["audit", "--level", "nan"], "--level: must be a finite number in (0, 1)"),
    (["train-draft", "--data", "d", "--out", "o", "--lr", "inf"], "--lr: must be a finite number > 0"),
    (["train-draft", "--data", "d", "--out", "o", "--eval-every", "0"], "--eval-every: must be an integer >= 1"),
    (["train-eagle", "--data", "d", "--out", "o", "--cls-weight", "nan"], "--cls-weight: must be a finite number"),
    (["distill-data", "--prompts", DEV_PROMPTS, "--out", "o", "--temperatures", "abc"], "--temperatures must be"),
    (["export", "--format", "gguf", "--model", "/no/such/model", "--out", "o.gguf"], "model not found: /no/such"),
    (["audit", "--method", "plain"], "draft-tree, medusa or eagle"),
    (["demo", "--methods", ","], "--methods is empty"),
    (["report", "--prompts", DEV_PROMPTS, "--out", "r", "--methods", "plain"], "--methods is empty"),
    (["loadtest", "--methods", " , "], "--methods is empty"),
    (["bench-batch", "--prompts", DEV_PROMPTS, "--method", "plain"], "pick one other than plain"),
    (["doctor", "--draft", "/nonexistent"], "unrecognized arguments: --draft"),
    (["bench", "--prompts", DEV_PROMPTS, "--request-methods", "ngram"], "go with --url"),
    (["audit", "--remote-model", "m"], "--remote-model goes with --url"),
    (["bench", "--prompts", DEV_PROMPTS, "--k", "1,,2"], "--k takes an integer"),
    (["fetch", "--model", ""], "--model is empty"),
    (["generate", "hi", "--method", "plain", "--draft-weights", "q4"], "--draft-weights is for --method draft"),
    (["bench", "--prompts", DEV_PROMPTS, "--json", "/proc/verispec.json"], "cannot write /proc/verispec.json"),
    (["generate", "hi", "--method", "draft", "--draft", " "], "--draft is empty"),
    (["bench-batch", "--prompts", DEV_PROMPTS, "--batch", "1,,2"], "--batch takes batch sizes"),
])
def test_bad_flags_of_every_command(capsys, argv, needle):
    """Found by probing every command with bad values: each is one line and status 2, before any model loads."""
    fails_cleanly(capsys, argv, needle)


def test_a_failed_report_leaves_no_folder_of_its_own(capsys, tmp_path):
    out = tmp_path / "report"
    fails_cleanly(capsys, ["report", "--prompts", DEV_PROMPTS, "--out", str(out), "--model", str(tmp_path / "none")],
                  "none")
    assert not out.exists()


def test_cost_curve_profile_needs_batch(capsys, tmp_path):
    fails_cleanly(capsys, ["cost-curve", "--profile", str(tmp_path / "p.json")], "--profile saves the batch curves")


@pytest.mark.parametrize("command", [["cost-curve", "--repeats", "1"], ["bench", "--prompts", DEV_PROMPTS],
                                     ["profile", "--prompts", DEV_PROMPTS], ["bench-batch", "--prompts", DEV_PROMPTS],
                                     ["loadtest", "--prompts", DEV_PROMPTS],
                                     ["profile", "--prompts", DEV_PROMPTS, "--json", "x.json", "--out"]])
def test_an_output_file_that_cannot_be_written_is_refused_before_the_work(capsys, tmp_path, command):
    """Every command's --json (and profile's --out) is checked before any model loads, not after minutes of work."""
    flag = [] if command[-1] == "--out" else ["--json"]
    (tmp_path / "file").write_text("mine")
    for where, needle in ((tmp_path, "is a folder: name a file"), (tmp_path / "file" / "x.json", "is a file")):
        fails_cleanly(capsys, [*command, *flag, str(where), "--model", str(tmp_path / "none")], needle)
    assert (tmp_path / "file").read_text() == "mine"


def test_a_tree_file_of_non_integer_ranks_is_one_line(capsys, tiny_dir, tmp_path):
    (tmp_path / "t.json").write_text("[[0], [1.5]]")
    fails_cleanly(capsys, ["generate", "hi", "--model", str(tiny_dir), "--method", "draft-tree", "--draft",
                           str(tiny_dir), "--tree", str(tmp_path / "t.json")], "integer ranks")
    for rank in ("60000", "99999999999999999999"):       # past what the draft ranks: refused before any output
        (tmp_path / "t.json").write_text(f"[[{rank}]]")
        fails_cleanly(capsys, ["generate", "hi", "--model", str(tiny_dir), "--method", "draft-tree", "--draft",
                               str(tiny_dir), "--tree", str(tmp_path / "t.json")], f"asks for rank {rank}")


def test_text_that_is_not_valid_unicode_is_one_line(capsys, tiny_dir, tmp_path):
    """Undecodable bytes on the command line (Python reads them as lone surrogates) or a JSON "\\ud800" escape in
    a prompt file: a one-line error, not the tokenizer's TypeError."""
    fails_cleanly(capsys, ["generate", "ab\udcff hi", "--model", str(tiny_dir)], "not valid Unicode")
    (tmp_path / "p.jsonl").write_text('{"prompt": "ab\\ud800c"}\n')
    fails_cleanly(capsys, ["bench", "--prompts", str(tmp_path / "p.jsonl"), "--model", str(tiny_dir),
                           "--methods", "ngram", "--max-new-tokens", "2"], "surrogates not allowed")


@pytest.mark.parametrize("command", [["profile", "--out", "p.json"], ["report", "--out", "r"]])
def test_a_context_past_the_models_is_refused_before_the_timing(capsys, tiny_dir, tmp_path, command):
    fails_cleanly(capsys, [command[0], "--prompts", DEV_PROMPTS, "--model", str(tiny_dir), "--methods", "ngram",
                           "--context", "100000", command[1], str(tmp_path / command[2])], "does not fit")
    if command[0] == "report":
        fails_cleanly(capsys, ["report", "--prompts", DEV_PROMPTS, "--model", str(tiny_dir), "--methods", "ngram",
                               "--k", "100000", "--out", str(tmp_path / "r")], "does not fit")


@pytest.mark.parametrize("change,needle", [({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling"),
                                           ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
                                           ({"mlp_bias": True}, "mlp_bias"),
                                           ({"head_dim": 128}, "head_dim 128"),
                                           ({"rope_theta": 0}, "rope_theta"), ({"rms_norm_eps": float("nan")},
                                                                              "rms_norm_eps"),
                                           ({"tie_word_embeddings": "false"}, "tie_word_embeddings must be true or"),
                                           ({"num_attention_heads": 4.9, "head_dim": None},
                                            "num_attention_heads must be an integer"),
                                           ({"num_hidden_layers": 1}, "hold layer 1, and the config says 1")])
def test_a_model_config_verispec_cannot_run_as_written_is_refused(capsys, tiny_dir, tmp_path, change, needle):
    """A config.json asking for what the model code does not implement (Llama 3's RoPE scaling, another
    activation, MLP biases, a head size of its own) or for values it cannot use would run another model than the
    folder's: refused in one line, not decoded silently."""
    import shutil
    folder = tmp_path / "m"
    shutil.copytree(tiny_dir, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, **change}))
    fails_cleanly(capsys, ["generate", "hi", "--model", str(folder), "--dtype", "fp32"], needle)


def test_a_gguf_file_whose_metadata_or_tensors_cannot_be_read_is_one_line(capsys, tmp_path, monkeypatch):
    """Whatever fails inside reading or dequantizing a GGUF file (metadata of the wrong type, a tensor that cannot
    be unpacked) is one line naming the file."""
    import verispec.model.gguf as gguf
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    for error in (TypeError("unhashable type: 'list'"), IndexError("index 1000000 is out of bounds"),
                  NotImplementedError("I8")):
        monkeypatch.setattr(gguf, "convert_gguf", lambda *a, e=error: (_ for _ in ()).throw(e))
        monkeypatch.setenv("VERISPEC_HOME", str(tmp_path / "home"))
        fails_cleanly(capsys, ["generate", "hi", "--model", str(tmp_path / "m.gguf")], "cannot read GGUF file")


@pytest.mark.parametrize("command", [["generate", "hello"], ["bench", "--limit", "1", "--prompts", DEV_PROMPTS]])
def test_k_max_reaches_the_engine(monkeypatch, capsys, tiny_dir, command):
    import verispec.engine as engine
    seen, real = [], engine.Engine.generate
    monkeypatch.setattr(engine.Engine, "generate",
                        lambda self, prompt, cfg, *a, **kw: seen.append(cfg.k_max) or real(self, prompt, cfg, *a, **kw))
    assert main([*command, "--model", str(tiny_dir), "--method" if command[0] == "generate" else "--methods",
                 "ngram", "--k-max", "5", "--max-new-tokens", "4"]) == 0
    assert 5 in seen and set(seen) <= {5, 12}                   # 12: bench's warm-up calls, outside the figures


def test_empty_prompt(capsys, tiny_dir):
    fails_cleanly(capsys, ["generate", "   ", "--model", str(tiny_dir)], "prompt is empty")


def test_k_larger_than_context(capsys, tiny_dir):
    fails_cleanly(capsys, ["generate", "hello", "--model", str(tiny_dir), "--k", "400"], "too large")
    # plain decoding drafts nothing: a model whose context is under twice k_max (12) still decodes plainly
    assert main(["generate", "hello", "--model", str(tiny_dir), "--method", "plain", "--k", "400",
                 "--max-new-tokens", "2"]) == 0


def test_prompt_plus_new_tokens_beyond_context(capsys, tiny_dir):
    fails_cleanly(capsys, ["generate", "hello", "--model", str(tiny_dir), "--max-new-tokens", "600"],
                  "exceeds the model's context")


def test_draft_with_other_vocabulary(capsys, tiny_dir, other_vocab_dir):
    fails_cleanly(capsys, ["generate", "hello", "--model", str(tiny_dir), "--method", "draft",
                           "--draft", str(other_vocab_dir)], "vocabulary")


def test_draft_method_without_draft(capsys, tiny_dir):
    fails_cleanly(capsys, ["generate", "hello", "--model", str(tiny_dir), "--method", "draft"], "--draft")


def test_unknown_method(capsys, tiny_dir):
    fails_cleanly(capsys, ["generate", "hello", "--model", str(tiny_dir), "--method", "magic"], "unknown method")


@pytest.mark.parametrize("which,needle", [("gguf", "cannot read GGUF"), ("folder", "cannot load weights"),
                                          ("badcfg", "bad config.json"), ("dir", "not a model folder")])
def test_corrupt_model_files(capsys, corrupt_files, which, needle):
    fails_cleanly(capsys, ["generate", "hello", "--model", str(corrupt_files[which])], needle)


def test_missing_model(capsys, tmp_path):
    fails_cleanly(capsys, ["generate", "hello", "--model", str(tmp_path / "nope.gguf")], "model not found")


@pytest.mark.parametrize("which,needle", [("missing", "cannot read prompts file"),
                                          ("dir", "cannot read prompts file"),
                                          ("bad_jsonl", "bad.jsonl:2: malformed"),
                                          ("nofield", "missing 'prompt' field")])
def test_bad_prompts_file(capsys, tiny_dir, corrupt_files, which, needle):
    path = corrupt_files["dir"] / "absent.jsonl" if which == "missing" else corrupt_files[which]
    fails_cleanly(capsys, ["bench", "--prompts", str(path), "--model", str(tiny_dir)], needle)


@pytest.mark.parametrize("line,needle", [("[1, 2]", "a JSON list, not an object"),
                                         ('{"prompt": "hi", "category": [5]}', "'id' and 'category' must be"),
                                         ('{"prompt": "hi", "id": "\\ud800"}', "surrogates not allowed")])
def test_a_prompt_line_of_the_wrong_shape_is_named(capsys, tmp_path, line, needle):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "fine"}\n' + line + "\n")
    fails_cleanly(capsys, ["bench", "--prompts", str(path)], "p.jsonl:2: malformed prompt line (")
    fails_cleanly(capsys, ["bench", "--prompts", str(path)], needle)


def test_a_prompts_category_may_be_absent_null_or_a_number(tmp_path):
    from verispec.prompts import load_prompts
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b", "category": null, "id": 7}\n{"prompt": "c", "category": 5}\n')
    assert [(p.id, p.category) for p in load_prompts([path])] == [("p-1", "all"), ("7", "all"), ("p-3", "5")]


def test_generate_json(capsys, tiny_dir):
    assert main(["generate", "hello", "--model", str(tiny_dir), "--max-new-tokens", "6", "--json",
                 "--method", "ngram", "--dtype", "fp32"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"text", "token_ids", "stats"} and len(out["token_ids"]) <= 6
    assert set(out["stats"]) >= {"target_passes", "drafted_tokens", "accepted_tokens", "acceptance_rate",
                                 "mean_accepted_tokens", "tokens_per_s"}


def test_generate_streams_text_then_statistics(capsys, tiny_dir):
    assert main(["generate", "hello", "--model", str(tiny_dir), "--max-new-tokens", "5", "--no-chat"]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() and "MAT" in captured.err and "alpha" in captured.err


def test_bench_writes_json(tmp_path, tiny_dir):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"prompt": f"Repeat: a b c {i}", "category": c})
                                 for i, c in enumerate(["x", "y", "x"])))
    out = tmp_path / "r.json"
    assert main(["bench", "--prompts", str(prompts), "--model", str(tiny_dir), "--methods", "plain,ngram",
                 "--max-new-tokens", "6", "--json", str(out), "--repeats", "3"]) == 0
    rows = json.loads(out.read_text())["results"]
    assert json.loads(out.read_text())["environment"]["repeats"] == 3
    assert {(r["method"], r["category"]) for r in rows} == {(m, c) for m in ("plain", "ngram")
                                                            for c in ("all", "x", "y")}
    for r in rows:
        assert set(r) >= {"method", "category", "tokens_per_s", "speedup_vs_plain", "mean_accepted_tokens",
                          "acceptance_rate", "greedy_match_rate"}
        assert r["greedy_match_rate"] == 1.0
    data = json.loads(out.read_text())
    assert data["environment"]["model_fingerprint"] and data["environment"]["cpu"] is not None
    for r in data["per_prompt"]:              # greedy: ngram's tokens are plain's, so are their digests
        assert len(r["plain"]["tokens_sha256"]) == 16 and r["ngram"]["tokens_sha256"] == r["plain"]["tokens_sha256"]


def test_a_token_digest_tells_runs_apart():
    from verispec.bench import tokens_digest
    assert tokens_digest(None) is None
    assert tokens_digest([1, 2, 3]) == tokens_digest([1, 2, 3])
    assert len({tokens_digest(t) for t in ([1, 2, 3], [3, 2, 1], [1, 2], [12, 3], [1, 23], [])}) == 6


def test_compare_runs_finds_the_prompt_whose_tokens_differ(tmp_path, tiny_dir):
    import subprocess
    import sys
    from pathlib import Path
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"p{i}", "prompt": f"Count: {i}"}) for i in range(2)))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main(["bench", "--prompts", str(prompts), "--model", str(tiny_dir), "--methods", "plain,ngram",
                 "--max-new-tokens", "5", "--json", str(a)]) == 0
    script = Path(__file__).resolve().parents[1] / "scripts" / "compare_runs.py"
    run = lambda x, y: subprocess.run([sys.executable, str(script), str(x), str(y)], capture_output=True, text=True)
    same = run(a, a)
    assert same.returncode == 0 and "same tokens: 4 of 4" in same.stdout
    data = json.loads(a.read_text())
    data["per_prompt"][1]["ngram"]["tokens_sha256"] = "0" * 16
    b.write_text(json.dumps(data))
    differ = run(a, b)
    assert differ.returncode == 1 and "differs: p1 ngram" in differ.stdout and "same tokens: 3 of 4" in differ.stdout
    bad = run(a, prompts)
    assert bad.returncode != 0 and bad.stderr.strip().startswith("compare_runs: error:")


def test_bench_refuses_zero_repeats_and_typical_acceptance_on_chains(tmp_path, tiny_dir, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "hi"}))
    assert main(["bench", "--prompts", str(prompts), "--model", str(tiny_dir), "--repeats", "0"]) == 2
    assert "--repeats must be >= 1" in capsys.readouterr().err
    assert main(["generate", "hi", "--model", str(tiny_dir), "--method", "ngram", "--acceptance", "typical"]) == 2
    assert "typical acceptance needs a tree: draft-tree" in capsys.readouterr().err


def test_python_dash_m_works(tiny_dir):
    r = subprocess.run([sys.executable, "-m", "verispec", "generate", "", "--model", str(tiny_dir)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip() == "verispec: error: the prompt is empty"


def test_ctrl_c_while_torch_imports_is_one_line():
    """The command's entry point, with a Ctrl-C arriving while torch is being imported (simulated by an import
    hook): one line and 130, no traceback; so importing the package itself must not import torch."""
    hook = ("import sys\n"
            "class CtrlC:\n"
            "    def find_spec(self, name, *a):\n"
            "        if name == 'torch':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, CtrlC())\n"
            "from verispec.launch import main\n"
            "sys.exit(main(['generate', 'hi']))\n")
    r = subprocess.run([sys.executable, "-c", hook], capture_output=True, text=True)
    assert r.returncode == 130 and r.stderr == "verispec: interrupted\n", r.stderr


def test_demo_compares_methods_with_plain_on_the_same_output(capsys, tiny_dir):
    assert main(["demo", "--model", str(tiny_dir), "--methods", "ngram", "--max-new-tokens", "8"]) == 0
    out = capsys.readouterr().out
    assert out.count("output identical to plain: yes") == 3 and "NO" not in out
