"""`verispec export --format gguf`: the file's layout, verispec reading it back into the very draft, the widened
output head's math, clean failures, and (llama-cpp-python installed) greedy tokens under llama.cpp."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from verispec.api import DEFAULT_DRAFT
from verispec.cli import main
from verispec.export.gguf import BIG, PAD, export_gguf
from verispec.model import loader


def reader(path):
    import gguf
    return gguf.GGUFReader(str(path))


@pytest.fixture(scope="module")
def exported(tmp_path_factory, default_dir):
    out, card = export_gguf(DEFAULT_DRAFT, tmp_path_factory.mktemp("export") / "draft")
    return out, card


@pytest.fixture(scope="module")
def draft_fp32(target_fp32):
    model, _, _ = loader.load(DEFAULT_DRAFT, "fp32", need_tokenizer=False, target_embedding=target_fp32[0].embed.weight)
    return model


def prompt_ids(tokenizer, n: int) -> list[list[int]]:
    with open("bench/dev_prompts.jsonl") as f:
        return [tokenizer.prompt_ids(json.loads(line)["prompt"]) for line in f][:n]


def test_layout_tokenizer_keys_and_card(exported, default_dir):
    out, card = exported
    r, target = reader(out), reader(loader.gguf_source(default_dir))
    theirs = {k: f.contents() for k, f in target.fields.items() if k.startswith("tokenizer.")}
    assert {k: f.contents() for k, f in r.fields.items() if k.startswith("tokenizer.")} == theirs
    kinds = {t.name: (t.tensor_type.name, tuple(int(n) for n in t.shape)) for t in r.tensors}
    d, v = 576 + PAD, 49152
    assert kinds["token_embd.weight"] == ("Q8_0", (d, v))           # the target's blocks, one more per row
    assert kinds["output.weight"] == ("F16", (d, v))
    assert kinds["output_norm.weight"] == ("F32", (d,))
    assert kinds["blk.1.attn_q.weight"] == ("F16", (d, 576)) and kinds["blk.1.ffn_down.weight"] == ("F16", (1536, d))
    assert len(kinds) == 3 + 2 * 9
    assert r.fields["llama.embedding_length"].contents() == d
    assert r.fields["llama.attention.key_length"].contents() == 64
    text = card.read_text()
    assert r.fields["general.description"].contents() == text
    assert "verispec train-draft" in text and "| alpha |" in text and "## GGUF export" in text


def test_verispec_reads_back_the_draft_bit_for_bit(exported, draft_fp32, target_fp32):
    back, tok, _ = loader.load(exported[0], "fp32")
    assert tok.vocab() == target_fp32[1].vocab()
    ids = torch.tensor(prompt_ids(target_fp32[1], 1))                      # [1, n]
    pos = torch.arange(ids.shape[1])[None]
    ours = draft_fp32.logits(draft_fp32(ids, pos, draft_fp32.new_cache(256)))
    theirs = back.logits(back(ids, pos, back.new_cache(256)))            # [1, n, vocab], -inf outside the head
    assert torch.equal(ours, theirs)


def test_widened_head_gives_the_drafts_logits_and_outside_tokens_nothing(exported, draft_fp32, target_fp32):
    """The file's final norm and output matrix, applied as llama.cpp does to the widened residual stream."""
    r = reader(exported[0])
    t = {x.name: np.asarray(x.data, dtype=np.float32) for x in r.tensors if x.name in ("output.weight",
                                                                                       "output_norm.weight")}
    eps = float(r.fields["llama.attention.layer_norm_rms_epsilon"].contents())
    seen = []
    hook = draft_fp32.norm.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    ids = torch.tensor(prompt_ids(target_fp32[1], 1))
    hidden = draft_fp32(ids, torch.arange(ids.shape[1])[None], draft_fp32.new_cache(256))
    hook.remove()
    x = seen[0][0].numpy().astype(np.float64)                             # [n, 576] residual before the norm
    c = next(float(np.frombuffer(x_.data.reshape(49152, -1)[0, -34:-32].tobytes(), np.float16)[0])
             for x_ in r.tensors if x_.name == "token_embd.weight")      # the appended block's scale (q = 1)
    wide = np.concatenate([x, np.full((len(x), 1), c), np.zeros((len(x), PAD - 1))], axis=1)   # [n, 608]
    h = wide / np.sqrt((wide ** 2).mean(-1, keepdims=True) + eps) * t["output_norm.weight"]
    assert np.abs(h[:, 576]).max() <= BIG and np.abs(h[:, 577:]).max() == 0
    logits = h @ t["output.weight"].T.astype(np.float64)                   # [n, vocab]
    ours = draft_fp32.logits(hidden)[0].double().numpy()
    inside = np.isfinite(ours)
    assert np.allclose(logits[inside], ours[inside], rtol=1e-5, atol=1e-4)
    assert logits[~inside].max() < -1e4
    assert (logits.argmax(-1) == ours.argmax(-1)).all()


def test_full_vocabulary_draft_round_trip(tmp_path, tiny_dir, default_dir):
    """A tied, full-vocabulary fp32 model: no widening; the Q/K permutation undone on reading back."""
    out, _ = export_gguf(tiny_dir, tmp_path / "tiny.gguf")
    assert "verispec.embedding_length" not in reader(out).fields
    a, _, _ = loader.load(tiny_dir, "fp32")
    b, _, _ = loader.load(out, "fp32")
    ids, pos = torch.tensor([[1, 5, 9, 300, 42]]), torch.arange(5)[None]
    assert torch.equal(a.logits(a(ids, pos, a.new_cache(16))), b.logits(b(ids, pos, b.new_cache(16))))


def fails(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_refuses_bad_input_and_leaves_nothing_half_written(tmp_path, capsys, monkeypatch, tiny_dir):
    out = tmp_path / "d.gguf"
    out.write_text("mine")
    fails(capsys, ["export", "--format", "gguf", "--draft", str(tiny_dir), "--out", str(out)], "pass --force")
    assert out.read_text() == "mine"
    fails(capsys, ["export", "--format", "gguf", "--draft", str(tmp_path), "--out", str(tmp_path / "e")], "not a model")
    fails(capsys, ["export", "--format", "gguf", "--draft", str(tiny_dir), "--out", "/proc/no/x"], "cannot write")
    from verispec.export import gguf as export

    def broken(*args):
        yield "token_embd.weight", torch.zeros(2)
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(export, "_tensors", broken)
    fails(capsys, ["export", "--format", "gguf", "--draft", str(tiny_dir), "--out", str(out), "--force"], "No space")
    assert out.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["d.gguf"]


def test_llamacpp_greedy_tokens_match_verispecs_draft(exported, draft_fp32, target_fp32):
    pytest.importorskip("llama_cpp")
    from verispec.export.roundtrip import first_divergence, llamacpp_greedy, verispec_greedy
    prompts = prompt_ids(target_fp32[1], 10)
    ours, theirs = verispec_greedy(draft_fp32, prompts, 32), llamacpp_greedy(exported[0], prompts, 32)
    same = sum(first_divergence(a, b) is None for a, b in zip(ours, theirs))
    assert same >= 9, [first_divergence(a, b) for a, b in zip(ours, theirs)]
