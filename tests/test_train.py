"""Draft distillation: data generation, resumable data, training that learns, bitwise resume, the CLI."""
import json
import os

import pytest
import torch

from verispec.cli import main
from verispec.model import loader
from verispec.model.llama import Llama, LlamaConfig
from verispec.train.data import Example, collate, load_examples
from verispec.train.draft import DraftShape, TrainConfig, evaluate, init_draft, make_optimizer, train_steps

V = 96
TINY_TARGET = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                          num_kv_heads=1, max_position=256)
SHAPE = DraftShape(layers=1, hidden=16, heads=2, kv_heads=1, intermediate=32, head_tokens=64)


def synthetic_examples(n, seed):
    """Answers follow next = (3 * prev + 1) % 64 with probability 0.7; the soft targets say exactly that."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = torch.randint(0, V, (6,), generator=g).tolist()
        answer, prev = [], prompt[-1] % 64
        for _ in range(12):
            nxt = (3 * prev + 1) % 64 if torch.rand((), generator=g) < 0.7 else int(torch.randint(0, 64, (),
                                                                                              generator=g))
            answer.append(nxt)
            prev = nxt
        ids, probs = [], []
        for t in range(12):
            before = prompt[-1] % 64 if t == 0 else answer[t - 1]
            top = [(3 * before + 1) % 64] + [(before + d) % 64 for d in (5, 9, 13)]
            ids.append(top)
            probs.append([0.7, 0.1, 0.1, 0.1])
        out.append(Example(f"s{i}", "synthetic", torch.tensor(prompt + answer), len(prompt),
                           torch.tensor(ids), torch.tensor(probs)))
    return out


def setup(loss="kl", steps=60):
    head_ids = torch.arange(64)
    head_index = torch.full((V,), -1, dtype=torch.long)
    head_index[head_ids] = torch.arange(64)
    torch.manual_seed(0)
    target = Llama(TINY_TARGET)
    model = init_draft(target, SHAPE, head_ids, seed=0)
    cfg = TrainConfig(loss=loss, steps=steps, tokens_per_batch=256, lr=1e-2, warmup=5)
    return model, make_optimizer(model, cfg), cfg, head_index


@pytest.mark.parametrize("loss", ["kl", "tvd", "ce"])
def test_training_reduces_loss_and_raises_alpha(loss):
    train, held = synthetic_examples(64, 1), synthetic_examples(16, 2)
    model, opt, cfg, head_index = setup(loss)
    before = evaluate(model, held, head_index)
    train_steps(model, opt, train, head_index, cfg, 0, cfg.steps)
    after = evaluate(model, held, head_index)
    assert after[loss] < before[loss] - 0.05
    assert after["alpha"] > before["alpha"] + 0.2 and after["greedy"] > 0.6


def test_resumed_training_equals_uninterrupted():
    train = synthetic_examples(40, 3)
    model_a, opt_a, cfg, head_index = setup(steps=16)
    train_steps(model_a, opt_a, train, head_index, cfg, 0, 16)

    model_b, opt_b, _, _ = setup(steps=16)
    train_steps(model_b, opt_b, train, head_index, cfg, 0, 7)
    saved = {"model": {k: v.clone() for k, v in model_b.state_dict().items()}, "opt": opt_b.state_dict()}
    model_c, opt_c, _, _ = setup(steps=16)          # a new process: fresh objects, state from the checkpoint
    model_c.load_state_dict(saved["model"])
    opt_c.load_state_dict(saved["opt"])
    train_steps(model_c, opt_c, train, head_index, cfg, 7, 16)
    for (name, a), (_, c) in zip(model_a.state_dict().items(), model_c.state_dict().items()):
        assert torch.equal(a, c), name


def test_collate_aligns_soft_targets_with_answer_positions():
    ex = synthetic_examples(1, 4)[0]
    head_index = torch.arange(V).masked_fill(torch.arange(V) >= 64, -1)
    tokens, targets, soft_ids, soft_probs = collate([ex], head_index)
    first = ex.first
    assert (targets[0, :first - 1] == -1).all() and targets[0, -1] == -1
    assert targets[0, first - 1:-1].tolist() == ex.tokens[first:].tolist()
    assert soft_ids[0, first - 1].tolist() == ex.topk_ids[0].tolist()


def test_distill_data_resumes_and_refuses_other_parameters(tmp_path, tiny_dir, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"t{i}", "category": "c", "prompt": f"Say {i} things"})
                                 for i in range(40)))
    out = tmp_path / "data"
    args = ["distill-data", "--prompts", str(prompts), "--out", str(out), "--model", str(tiny_dir),
            "--batch", "8", "--max-new-tokens", "6", "--top-k-probs", "4", "--dtype", "fp32"]
    assert main(args) == 0
    shards = sorted(out.glob("shard-*.pt"))
    assert shards and len(load_examples(out)) >= 30
    first = shards[0].read_bytes()
    shards[-1].unlink()                            # as if killed before the last shard
    assert main(args) == 0
    assert sorted(out.glob("shard-*.pt")) == shards and shards[0].read_bytes() == first
    assert main(args[:-4] + ["--max-new-tokens", "7", "--top-k-probs", "4", "--dtype", "fp32"]) == 2
    assert "other parameters" in capsys.readouterr().err
    whole = shards[-1].read_bytes()
    for junk in (b"junk", whole[:len(whole) // 2]):   # not a shard distill-data wrote, or one cut short: refused,
        shards[-1].write_bytes(junk)                  # not skipped
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "is not a shard distill-data wrote" in err and err.count("\n") == 1
    shards[-1].unlink()
    assert main(args) == 0 and sorted(out.glob("shard-*.pt")) == shards
    capsys.readouterr()
    prompts.write_text(prompts.read_text().replace("Say 3 things", "Say three things"))   # same name, other prompts
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "other parameters (prompts_sha256)" in err and err.count("\n") == 1


def test_distill_data_split_by_shards_equals_one_run(tmp_path, tiny_dir, capsys):
    """--shards A:B answers only those batches of the plan, as the whole run would: folders made apart combine."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"t{i}", "category": "c", "prompt": f"Say {i} things"})
                                 for i in range(30)))
    common = ["--prompts", str(prompts), "--model", str(tiny_dir), "--batch", "8", "--max-new-tokens", "5",
              "--top-k-probs", "4", "--dtype", "fp32", "--temperatures", "0,1"]
    assert main(["distill-data", "--out", str(tmp_path / "whole")] + common) == 0
    assert main(["distill-data", "--out", str(tmp_path / "split"), "--shards", "1:3"] + common) == 0
    assert sorted(p.name for p in (tmp_path / "split").glob("shard-*.pt")) == ["shard-00001.pt", "shard-00002.pt"]
    assert main(["distill-data", "--out", str(tmp_path / "split"), "--shards", "0:1"] + common) == 0
    assert main(["distill-data", "--out", str(tmp_path / "split"), "--shards", "3:99"] + common) == 0
    whole = sorted((tmp_path / "whole").glob("shard-*.pt"))
    assert len(whole) == 4 and [p.name for p in whole] == sorted(p.name for p in (tmp_path / "split").glob("shard-*"))
    for path in whole:
        a, b = torch.load(path), torch.load(tmp_path / "split" / path.name)
        assert a.keys() == b.keys() and a["ids"] == b["ids"] and a["answers"] == b["answers"]
        assert a["prompts"] == b["prompts"] and a["temperatures"] == b["temperatures"]
        for field in ("topk_ids", "topk_probs"):
            assert all(torch.equal(x, y) for x, y in zip(a[field], b[field], strict=True))
    capsys.readouterr()
    for bad, says in (("4:9", "the plan has only 4 batches"), ("2:1", "must be A:B"), ("x", "must be A:B")):
        assert main(["distill-data", "--out", str(tmp_path / "bad"), "--shards", bad] + common) == 2
        err = capsys.readouterr().err
        assert says in err and err.count("\n") == 1 and not (tmp_path / "bad").exists()


def test_cached_features_key_a_set_of_shards_by_their_names(tmp_path):
    """Shards 0..n-1 are keyed by n (as before --shards); another set of as many shards is other data."""
    from types import SimpleNamespace

    from verispec.train.workdir import source_settings
    keys = []
    for name, shards in (("whole", (0, 1, 2)), ("late", (3, 4, 5)), ("gap", (0, 2, 4)), ("whole2", (0, 1, 2))):
        folder = tmp_path / name
        folder.mkdir()
        for i in shards:
            (folder / f"shard-{i:05d}.pt").write_bytes(b"")
        keys.append(source_settings(SimpleNamespace(data=str(folder), model=None))["shards"])
    assert keys[0] == keys[3] == 3 and len({keys[0], keys[1], keys[2]}) == 3


def test_distill_data_refuses_prompts_and_answers_past_the_context(tmp_path, tiny_dir, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "t0", "category": "c", "prompt": "Say"}))
    assert main(["distill-data", "--prompts", str(prompts), "--out", str(tmp_path / "d"), "--model", str(tiny_dir),
                 "--dtype", "fp32", "--max-prompt-tokens", "384", "--max-new-tokens", "400"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "exceeds the model's context of 512" in err and not (tmp_path / "d").exists()


def test_a_failed_distill_data_run_leaves_its_folder_usable(tmp_path, tiny_dir, capsys):
    """A run refused once the model is loaded (--top-k-probs beyond the vocabulary) writes no manifest, so the
    same --out then takes a good run: it is not held to the failed run's parameters."""
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"t{i}", "category": "c", "prompt": f"Say {i}"}) for i in range(9)))
    out = tmp_path / "data"
    args = ["distill-data", "--prompts", str(prompts), "--out", str(out), "--model", str(tiny_dir),
            "--batch", "8", "--max-new-tokens", "3", "--dtype", "fp32", "--top-k-probs"]
    assert main(args + ["100000000"]) == 2
    assert "--top-k-probs must be at most the vocabulary" in capsys.readouterr().err
    assert not (out / "manifest.json").exists()
    assert main(args + ["4"]) == 0 and (out / "manifest.json").exists()


def test_batched_greedy_answers_match_the_engine(target_fp32):
    from verispec.engine import Engine, GenerationConfig
    from verispec.train.batch_generate import sample_batch
    model, tok = target_fp32
    prompts = [tok.prompt_ids(p) for p in ("Name a colour.", "What is 7 times 8? Explain briefly.")]
    batch = sample_batch(model, prompts, [0.0, 0.0], 12, tok.stop_token_ids, seed=0)
    for ids, got in zip(prompts, batch):
        expected = Engine(model).generate(ids, GenerationConfig(max_new_tokens=12, stop_token_ids=frozenset()))
        assert got.answer[:8] == expected.token_ids[:8]
        assert got.topk_ids.shape == (len(got.answer), 32)
        probs = got.topk_probs.float()
        assert (probs.sum(-1) <= 1.001).all() and (probs[:, :-1] >= probs[:, 1:]).all()
        assert got.topk_ids[:, 0].tolist() == got.answer            # greedy rows: the answer is the top-1


def test_batched_answers_do_not_depend_on_the_batch(target_fp32):
    from verispec.train.batch_generate import sample_batch
    model, tok = target_fp32
    prompts = [tok.prompt_ids(p) for p in ("Name a colour.", "Write a haiku about the sea, then explain it.",
                                           "What is 7 times 8?")]
    together = sample_batch(model, prompts, [0.0] * 3, 10, tok.stop_token_ids, seed=0)
    for ids, got in zip(prompts, together):
        alone = sample_batch(model, [ids], [0.0], 10, tok.stop_token_ids, seed=0)[0]
        assert got.answer == alone.answer
        assert torch.equal(got.topk_ids, alone.topk_ids) and torch.equal(got.topk_probs, alone.topk_probs)


def test_train_draft_cli_writes_a_loadable_draft(tmp_path, tiny_dir, tiny_distill_dir):
    data = tiny_distill_dir
    out = tmp_path / "draft"
    flags = ["train-draft", "--data", str(data), "--out", str(out), "--model", str(tiny_dir),
             "--layers", "1", "--hidden", "16", "--heads", "2", "--kv-heads", "1", "--intermediate", "32",
             "--head-tokens", "512", "--steps", "6", "--eval-every", "3", "--tokens-per-batch", "256"]
    assert main(flags + ["--stop-at", "3"]) == 0          # early stop: a draft now, the schedule still spans 6
    assert "stopped early at step 3 of the 6-step schedule" in (out / "README.md").read_text()
    assert main(flags) == 0                               # the same flags without --stop-at finish the run
    history = json.loads((tmp_path / "draft.work" / "history.json").read_text())
    assert [h["step"] for h in history] == [3, 6]
    draft, _, _ = loader.load(out, "fp32")
    assert draft.cfg.head_tokens == 512 and "alpha" in (out / "README.md").read_text()
    assert "stopped early" not in (out / "README.md").read_text()
    umask = os.umask(0)
    os.umask(umask)
    assert (out / "model.safetensors").stat().st_mode & 0o777 == 0o666 & ~umask   # not mkstemp's 0600
    assert main(["generate", "hello", "--model", str(tiny_dir), "--method", "draft", "--draft", str(out),
                 "--max-new-tokens", "5", "--dtype", "fp32"]) == 0


def test_train_draft_refuses_shapes_and_lengths_it_cannot_train_in_one_line(tmp_path, tiny_dir, tiny_distill_dir,
                                                                             capsys):
    flags = ["train-draft", "--data", str(tiny_distill_dir), "--out", str(tmp_path / "d"), "--model", str(tiny_dir)]
    for bad in (["--heads", "0"], ["--kv-heads", "0"], ["--hidden", "-16"], ["--intermediate", "0"],
                ["--max-tokens", "8"], ["--eval-examples", "-1"]):
        assert main(flags + bad) == 2
        err = capsys.readouterr().err
        assert bad[0] in err and err.count("\n") == 1
    assert not (tmp_path / "d").exists() and not (tmp_path / "d.work").exists()


def test_training_refuses_another_models_data_and_a_damaged_checkpoint_in_one_line(tmp_path, tiny_dir,
                                                                                  tiny_distill_dir, capsys):
    """distill-data's manifest names the model whose answers the data holds: training for another is refused
    (SmolLM2's token ids fed to Qwen trained garbage heads, and exited 0). A damaged checkpoint is named, with how
    to start afresh, not a traceback from torch."""
    import shutil
    data = tmp_path / "data"
    shutil.copytree(tiny_distill_dir, data)
    manifest = json.loads((data / "manifest.json").read_text())
    flags = ["train-draft", "--data", str(data), "--out", str(tmp_path / "d"), "--layers", "1", "--hidden", "16",
             "--heads", "2", "--kv-heads", "1", "--intermediate", "32", "--head-tokens", "512", "--steps", "2",
             "--eval-every", "2", "--tokens-per-batch", "256"]
    for made_by, model in (("qwen2.5-coder-0.5b", []), ("default", ["--model", "Qwen2.5-Coder-0.5B"])):
        (data / "manifest.json").write_text(json.dumps({**manifest, "model": made_by}))
        assert main(flags + model) == 2
        err = capsys.readouterr().err
        assert f"holds answers of {made_by}" in err and err.count("\n") == 1
        assert not (tmp_path / "d").exists() and not (tmp_path / "d.work").exists()
    (data / "manifest.json").write_text(json.dumps(manifest))
    assert main(flags + ["--model", str(tiny_dir)]) == 0
    capsys.readouterr()
    import torch
    for damaged in ("garbage", {"settings": {}}):      # bytes of no checkpoint; a pickle of something else
        if isinstance(damaged, str):
            (tmp_path / "d.work" / "checkpoint.pt").write_text(damaged)
        else:
            torch.save(damaged, tmp_path / "d.work" / "checkpoint.pt")
        assert main(flags + ["--model", str(tiny_dir), "--steps", "4"]) == 2
        err = capsys.readouterr().err
        assert "cannot read" in err and "checkpoint.pt" in err and "start afresh" in err and err.count("\n") == 1
    torch.save({"x": 1}, data / "shard-00000.pt")         # a shard of another shape: named, not a KeyError
    assert main(flags + ["--model", str(tiny_dir), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert "shard-00000.pt" in err and "not a shard distill-data wrote" in err and err.count("\n") == 1


def test_draft_from_target_layers_borrows_and_freezes_the_embedding(tmp_path, tiny_dir):
    from verispec.train.draft import DraftShape
    from verispec.train.train_draft_cmd import save_draft
    target, _, _ = loader.load(tiny_dir, "fp32")
    draft = init_draft(target, DraftShape(layers=1, head_tokens=64, from_target=True), torch.arange(64), seed=0)
    assert draft.cfg.hidden_size == target.cfg.hidden_size and not draft.embed.weight.requires_grad
    assert torch.equal(draft.layers[0].mlp.w2.weight, target.layers[0].mlp.w2.weight)
    save_draft(draft, tmp_path / "d", tiny_dir, "card")
    with pytest.raises(Exception, match="borrows its target's embedding"):
        loader.load(tmp_path / "d", "fp32")
    again, _, _ = loader.load(tmp_path / "d", "fp32", target_embedding=target.embed.weight)
    assert torch.equal(again.embed.weight, target.embed.weight)
