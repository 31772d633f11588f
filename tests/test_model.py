"""The native model against `transformers` on the same checkpoint, and the KV cache's rollback and compaction."""
import pytest
import torch

from verispec.model import loader

PROMPTS = ["Write a haiku about the sea, and explain it.", "def fibonacci(n):\n    ",
           "Natalia sold clips to 48 of her friends in April. How many clips did she sell?"]


def run(model, ids, cache=None, start=0):
    cache = cache or model.new_cache(256)
    x = torch.tensor([ids])
    return model.logits(model(x, torch.arange(start, start + len(ids))[None], cache)), cache


@pytest.fixture(scope="module")
def hf_from_gguf(default_dir):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    gguf = loader.default_gguf()
    return transformers.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                             dtype=torch.float32).eval()


@pytest.mark.parametrize("text", PROMPTS)
def test_logits_match_transformers_reading_the_same_gguf(target_fp32, hf_from_gguf, text):
    model, tok = target_fp32
    ids = tok.prompt_ids(text)
    ours, _ = run(model, ids)
    with torch.no_grad():
        theirs = hf_from_gguf(torch.tensor([ids])).logits
    assert ours.shape == theirs.shape
    assert torch.allclose(ours, theirs, atol=1e-3, rtol=1e-4), (ours - theirs).abs().max()
    assert torch.equal(ours.argmax(-1), theirs.argmax(-1))


def test_tokenizer_and_chat_template_match_transformers(target_fp32, default_dir):
    transformers = pytest.importorskip("transformers")
    gguf = loader.default_gguf()
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    _, tok = target_fp32
    texts = PROMPTS + ["  spaces  and\ttabs\n\nnewlines", "ünïcödé — “quotes” 日本語 🙂", "x=1234567890; y = 3.14159",
                       "<|im_start|>user\nhi<|im_end|>"]
    for text in texts:
        assert tok.encode(text) == hf_tok(text, add_special_tokens=False)["input_ids"], text
        if "<|" not in text:  # decode drops special tokens
            assert tok.decode(tok.encode(text)) == text
    chat = hf_tok.apply_chat_template([{"role": "user", "content": PROMPTS[0]}], add_generation_prompt=True,
                                      tokenize=False)
    assert tok.chat_prompt(PROMPTS[0]) == chat


def test_truncate_then_refill_equals_fresh_prefill(target_fp32):
    model, tok = target_fp32
    ids = tok.prompt_ids(PROMPTS[0])
    fresh, _ = run(model, ids)
    logits, cache = run(model, ids[:-4] + [11, 12, 13, 14, 15, 16])   # a wrong continuation, then roll back
    cache.truncate(len(ids) - 4)
    again, _ = run(model, ids[-4:], cache, start=len(ids) - 4)
    assert torch.allclose(again, fresh[:, -4:], atol=1e-4, rtol=1e-4)


def test_explicit_mask_equals_implicit_causal_mask(target_fp32):
    model, tok = target_fp32
    ids = tok.prompt_ids(PROMPTS[1])
    implicit, _ = run(model, ids)
    cache = model.new_cache(256)
    n = len(ids)
    mask = torch.ones(n, n, dtype=torch.bool).tril()[None]                  # [1, n, n]
    explicit = model.logits(model(torch.tensor([ids]), torch.arange(n)[None], cache, mask))
    assert torch.allclose(implicit, explicit, atol=1e-4, rtol=1e-4)     # row blocks vs one pass: fp32 rounding


def test_compact_keeps_a_path_as_if_only_it_was_fed(target_fp32):
    """Feed prefix + [a, b, c] with positions as a 3-branch 'tree' of depth 1, keep branch c, and continue."""
    model, tok = target_fp32
    ids = tok.prompt_ids(PROMPTS[2])
    n = len(ids)
    cache = model.new_cache(256)
    model(torch.tensor([ids]), torch.arange(n)[None], cache)
    siblings = torch.tensor([[101, 202, 303]])
    mask = torch.cat([torch.ones(3, n, dtype=torch.bool), torch.eye(3, dtype=torch.bool)], 1)[None]
    model(siblings, torch.full((1, 3), n), cache, mask)                     # all three at position n
    cache.compact(n, torch.tensor([2]))
    cont, _ = run(model, [7], cache, start=n + 1)
    straight, _ = run(model, ids + [303, 7])
    assert torch.allclose(cont[0, -1], straight[0, -1], atol=1e-4, rtol=1e-4)


def test_batched_rows_are_independent(target_fp32):
    model, tok = target_fp32
    a, b = tok.prompt_ids("Hello there")[:8], tok.prompt_ids("Tell me a joke")[:8]
    cache = model.new_cache(64, batch=2)
    both = model.logits(model(torch.tensor([a, b]), torch.arange(8)[None].repeat(2, 1), cache))
    alone, _ = run(model, b)
    assert torch.allclose(both[1], alone[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("widths", [[3, 2], [8, 3, 1]])
def test_tree_logits_equal_decoding_each_path_alone_bit_for_bit(default_dir, widths):
    """bf16 on CPU: every tree node's logits are exactly those of decoding its root-to-node path one token at a
    time (tree attention runs row by row over each node's own path), so tree greedy = plain greedy exactly.
    Matrix products stay row-invariant only up to 32 rows, so the 57-row tree runs in blocks of rows."""
    from verispec.tree import topk_per_depth
    model, tok, _ = loader.load(default_dir, "bf16", "cpu")
    ids = tok.prompt_ids(PROMPTS[0])
    tree = topk_per_depth(widths)
    tokens = [42] + torch.randint(0, model.cfg.vocab_size, (tree.size,), generator=torch.Generator().manual_seed(0)
                                  ).tolist()
    cache = model.new_cache(len(ids) + tree.size + 4)
    model(torch.tensor([ids[:-1]]), torch.arange(len(ids) - 1)[None], cache)
    start = cache.length
    mask = torch.cat([torch.ones(1 + tree.size, start, dtype=torch.bool), tree.ancestry], 1)[None]
    together = model.logits(model(torch.tensor([tokens]), (start + torch.tensor(tree.depths))[None], cache, mask))
    assert cache.length == start + 1 + tree.size
    nodes = range(1 + tree.size) if tree.size < 32 else (0, 9, 33, 40, tree.size)   # both sides of row 32
    for node in nodes:
        path = [node]
        while path[-1] > 0:
            path.append(tree.parents[path[-1]])
        cache.truncate(start)
        for depth, i in enumerate(reversed(path)):
            alone = model.logits(model(torch.tensor([[tokens[i]]]), torch.tensor([[start + depth]]), cache))
        assert torch.equal(alone[0, -1], together[0, node]), node
