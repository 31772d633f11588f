"""4-bit proposers (verispec.model.requant): a draft's or heads' matrices requantized to Q4_1 at load.

- `quant.q4_1` keeps every weight within half a quantization step (plus the fp16 rounding of its block's offset)
  and reproduces weights that already lie on a 4-bit grid exactly;
- `requant.to_q4` turns GGUF parts and float weights of a module's layers into Q4_1 integer products (4-bit
  kinds stay as stored), and the layer's output stays close to the original's;
- wherever verispec's CPU kernels run the shipped draft and heads run 4-bit (`--draft-weights auto`, beside a
  gguf-q8 target and a float one alike), `native` keeps them as loaded, and both give plain decoding's tokens (the
  output never depends on a proposer's weights).
"""
import pytest
import torch

from verispec import kernels
from verispec.errors import VerispecError
from verispec.model import ops, quant, requant

from test_quant import random_blocks


def test_q4_1_keeps_each_weight_within_half_a_step():
    torch.manual_seed(0)
    w = torch.randn(40, 96) * torch.logspace(-3, 1, 40)[:, None]                     # rows of very different scale
    w[3, :32] = 0.5                                                                   # a constant block: d = 0
    p = quant.q4_1(w)
    assert (p.kind, p.n, p.k) == ("Q4_1", 40, 96)
    back = quant.dequantize(p)
    blocks = w.view(40, 3, 32)
    step = (blocks.amax(-1) - blocks.amin(-1)) / 15                                  # [40, 3]
    m = blocks.amin(-1)
    bound = step / 2 * 1.002 + m.abs() * 2 ** -11 + 1e-7                              # + fp16 rounding of d and m
    err = (back - w).abs().view(40, 3, 32).amax(-1)
    assert bool((err <= bound).all()), float((err - bound).max())
    assert torch.equal(back[3, :32], w[3, :32])


def test_q4_1_reproduces_a_4_bit_grid_exactly():
    q = torch.randint(0, 16, (16, 64)).float()
    q[:, ::32] = 0                                                                    # each block spans 0..15
    q[:, 1::32] = 15
    w = q * 0.25 - 1.0                                                                # d = 0.25, m = -1: exact in fp16
    assert torch.equal(quant.dequantize(quant.q4_1(w)), w)


def test_q4_1_needs_whole_blocks():
    with pytest.raises(VerispecError, match="multiple of 32"):
        quant.q4_1(torch.zeros(4, 40))


@pytest.mark.skipif(kernels.load() is None, reason="the integer product runs on verispec's kernels")
@pytest.mark.parametrize("kind", [None, "Q8_0", "Q5_0", "Q4_1"])
def test_to_q4_turns_a_layer_into_a_close_4_bit_integer_product(kind):
    torch.manual_seed(1)
    lin = ops.Linear(96, 48)
    torch.nn.init.normal_(lin.weight, std=0.05)
    if kind is not None:
        p = quant.pack(random_blocks(kind, 48, 96, seed=2), kind, 48, 96)
        lin.quant, lin.int8 = [p], False
        exact = quant.dequantize(p)
    else:
        exact = lin.weight.detach().clone()
    x = torch.randn(5, 96)
    before = (x @ exact.T + lin.bias).detach()
    saved = requant.to_q4(torch.nn.Sequential(lin))
    assert lin.int8 and [p.kind for p in lin.quant] == ["Q4_1"]
    if kind == "Q4_1":                                       # already 4-bit: kept as stored
        assert saved == 0 and torch.equal(quant.dequantize(lin.quant[0]), exact)
    else:
        assert saved > 0
    if kind is None:
        assert lin.weight.device.type == "meta"              # the float weight is only a shape now
    after = lin(x, fp32=True)
    assert after.shape == (5, 48)
    assert float((after - before).norm() / before.norm()) < 0.15
    assert torch.equal(after, quant.matmul_q8(x, lin.quant[0], lin.bias))
    out = torch.randn(30, 96)
    assert torch.equal(requant.product(out)(x[None])[0], quant.matmul_q8(x, quant.q4_1(out)))


@pytest.fixture(scope="module")
def q8():
    from verispec.api import Target
    return Target.load(None, "gguf-q8", "cpu")


def test_draft_weights_choice(q8, target_bf16):
    from dataclasses import replace

    from verispec.api import Target, draft_weights
    assert draft_weights(q8) == ("q4" if kernels.load() is not None else "native")
    assert draft_weights(replace(q8, draft_weights="native")) == "native"
    assert draft_weights(target_bf16) == ("q4" if kernels.load() is not None else "native")    # a float target too
    assert draft_weights(replace(target_bf16, draft_weights="native")) == "native"
    with pytest.raises(VerispecError, match="draft weights"):
        Target.load(None, "gguf-q8", "cpu", draft_weights="q3")


@pytest.mark.skipif(kernels.load() is None, reason="the integer product runs on verispec's kernels")
@pytest.mark.parametrize("method,tree", [("draft", None), ("medusa", "8"), ("eagle", "dynamic+ngram")])
def test_4_bit_and_native_proposers_both_give_plain_decodings_tokens(q8, method, tree):
    from dataclasses import replace

    from verispec.api import make_proposer
    from verispec.engine import Engine, GenerationConfig
    native = replace(q8, draft_weights="native")
    four, kept = make_proposer(method, q8, tree=tree), make_proposer(method, native, tree=tree)
    net = lambda p: p.model if method == "draft" else p.heads if method == "medusa" else p.head  # noqa: E731
    kinds = lambda p: {x.kind for m in net(p).modules() if isinstance(m, ops.Linear) and m.quant  # noqa: E731
                       for x in m.quant}
    assert kinds(four) == {"Q4_1"} and "Q4_1" not in kinds(kept) | {None}
    cfg = GenerationConfig(max_new_tokens=20, k=3, stop_token_ids=q8.tokenizer.stop_token_ids)
    ids = q8.tokenizer.prompt_ids("Write a function that reverses a string.")
    plain = Engine(q8.model).generate(ids, cfg).token_ids
    for proposer in (four, kept):
        assert Engine(q8.model, proposer).generate(ids, cfg).token_ids == plain
