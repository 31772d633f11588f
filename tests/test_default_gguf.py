"""The default model (SmolLM2-135M, Q4_1 with a Q8_0 embedding) read as its GGUF stores it.

- `--dtype gguf`: Q4_1 blocks and the tied Q8_0 head multiplied as stored, each layer in one kernel call (`qlayer`):
  the fp32 model's logits bit for bit, for a prefill, a chain and a token tree.
- `--dtype gguf-q8`: the fused layer gives the op-by-op, row-by-row reference's bits, and every method's greedy
  output is plain gguf-q8 decoding's.
"""
import pytest
import torch

from verispec.model import loader, ops

PROMPT = "Write a function that merges two sorted lists."


@pytest.fixture(scope="module")
def q8():
    from verispec.api import Target
    return Target.load(None, "gguf-q8", "cpu")


def passes(model, ids):
    """logits of a prefill, a 5-row chain after it, and a 4-node tree (two branches of two) after that."""
    cache = model.new_cache(256)
    n = len(ids)
    first = model.logits(model(torch.tensor([ids]), torch.arange(n)[None], cache))
    chain = model.logits(model(torch.tensor([ids[:5]]), torch.arange(n, n + 5)[None], cache))
    mask = torch.ones(1, 4, n + 9, dtype=torch.bool)
    mask[0, :, n + 5:] = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]], dtype=torch.bool)
    tree = model.logits(model(torch.tensor([ids[5:9]]), torch.tensor([[n + 5, n + 6, n + 5, n + 6]]), cache, mask))
    return first, chain, tree


def test_gguf_dtype_is_the_fp32_model_bit_for_bit(target_fp32):
    fp32, tok = target_fp32
    model, _, _ = loader.load(None, "gguf")
    assert [p.kind for p in model.layers[0].attn.wqkv.quant] == ["Q4_1"]            # q, k, v merged: one call
    assert [p.kind for p in model.lm_head.quant] == ["Q8_0"] and model.cfg.tie_embeddings
    ids = tok.prompt_ids(PROMPT)
    for a, b in zip(passes(model, ids), passes(fp32, ids)):
        assert torch.equal(a, b)


def test_gguf_q8_fused_layers_are_the_row_by_row_reference(q8):
    model, ids = q8.model, q8.tokenizer.prompt_ids(PROMPT)
    assert model.layers[0].mlp.w2.int8 and model.lm_head.int8
    fast = passes(model, ids)
    with ops.one_row_at_a_time():                      # op by op (no fused layer), one row at a time
        slow = passes(model, ids)
    for a, b in zip(fast, slow):
        assert torch.equal(a, b)


@pytest.mark.parametrize("method,tree", [("ngram", None), ("draft", None), ("draft-tree", "2,2,1"),
                                         ("medusa", "8"), ("eagle", None), ("eagle", "dynamic+ngram")])
def test_every_method_under_gguf_q8_gives_plain_decodings_tokens(q8, method, tree):
    from verispec.api import make_proposer
    from verispec.engine import Engine, GenerationConfig
    cfg = GenerationConfig(max_new_tokens=24, k=3, stop_token_ids=q8.tokenizer.stop_token_ids)
    for prompt in ("def is_prime(n):", "List three colours of the rainbow."):
        ids = q8.tokenizer.prompt_ids(prompt)
        plain = Engine(q8.model).generate(ids, cfg).token_ids
        out = Engine(q8.model, make_proposer(method, q8, tree=tree)).generate(ids, cfg)
        assert out.token_ids == plain, (method, tree, prompt)


def test_loading_a_draft_leaves_the_targets_embedding_as_it_was(q8):
    """A draft borrows its target's input embedding and, beside a quantized target, is converted to bf16. The
    conversion must make the draft a tensor of its own: the target's parameter once became bf16 in place, so plain
    decoding after loading a draft decoded a different model from plain decoding before (its greedy tokens
    changed on an AMX machine)."""
    from verispec.api import make_proposer
    before = q8.model.embed.weight.clone()
    draft = make_proposer("draft", q8).model
    assert q8.model.embed.weight.dtype == before.dtype == torch.float32
    assert torch.equal(q8.model.embed.weight, before)
    assert draft.embed.weight.dtype == torch.bfloat16
