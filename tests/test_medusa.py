"""Medusa: trees from measured acceptance, the heads, training that learns and resumes bitwise, the proposer."""
import json

import pytest
import torch

from verispec.cli import main
from verispec.model.llama import Llama, LlamaConfig
from verispec.model.medusa import MedusaHeads, load_heads
from verispec.proposers.medusa import MedusaProposer, auto_tree
from verispec.tree import topk_per_depth, tree_from_acceptance
from verispec.train.medusa import acceptance, answer_features, head_targets, kl_loss, train_steps

from test_train import V, synthetic_examples


def test_tree_from_acceptance_takes_the_likeliest_nodes_and_sums_them():
    acc = [[0.6, 0.2, 0.1], [0.5, 0.1]]
    tree, expected = tree_from_acceptance(acc, 3)
    assert tree.choices == ((0,), (1,), (0, 0))               # 0.6, 0.2 and 0.6 * 0.5 = 0.3 beat 0.1
    assert expected == pytest.approx(0.6 + 0.3 + 0.2)
    big, e_big = tree_from_acceptance(acc, 9)                  # every node there is: 3 + 3 * 2
    assert big.size == 9 and e_big == pytest.approx(0.9 + 0.9 * 0.6)
    for node in big.choices:                                  # closed under parents
        assert len(node) == 1 or node[:-1] in big.choices


def test_auto_tree_trades_expected_tokens_against_verify_cost():
    acc = [[0.6, 0.2, 0.1, 0.05], [0.5, 0.2, 0.1], [0.4, 0.1], [0.3]]
    free, predicted = auto_tree(acc, lambda n: 1.0)
    assert free.size == max(predicted) and predicted[64] >= predicted[4]       # free verification: biggest
    steep, predicted = auto_tree(acc, lambda n: 1 + 0.1 * n)
    assert steep.size == 3                                      # each node 10% of a pass: a small tree
    assert predicted[4] == pytest.approx((1 + tree_from_acceptance(acc, 4)[1]) / 1.4)
    dear, _ = auto_tree(acc, lambda n: 1 + 0.4 * n)               # rows dear (AVX2): one node, a chain of one
    assert dear.size == 1 and dear.choices == ((0,),)


def tiny_target():
    torch.manual_seed(0)
    model = Llama(LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                              num_kv_heads=1, max_position=256))
    for p in model.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return model.eval()


def setup_heads(target, num_heads=2):
    head_ids = torch.arange(64)
    head_index = torch.full((V,), -1, dtype=torch.long)
    head_index[head_ids] = torch.arange(64)
    torch.manual_seed(0)
    heads = MedusaHeads(num_heads, 32, head_ids).attach(target.output_rows(head_ids))
    return heads, torch.optim.AdamW(heads.blocks.parameters(), lr=3e-2), head_index


def test_untrained_heads_repeat_the_targets_next_token_guess():
    target = tiny_target()
    heads, _, _ = setup_heads(target, 3)
    h = torch.randn(5, 32)
    logits = heads(h)                                                   # [5, 3, 64]
    assert logits.shape == (5, 3, 64) and len({id(b) for b in heads.blocks}) == 3   # distinct blocks
    expected = target.logits(h)[:, :64]
    for d in range(3):
        torch.testing.assert_close(logits[:, d], expected)


def test_training_heads_lowers_the_loss_and_lifts_accuracy_and_resumes_bitwise():
    target = tiny_target()
    train, held = synthetic_examples(64, 1), synthetic_examples(16, 2)
    feats, held_f = torch.cat(answer_features(target, train)), torch.cat(answer_features(target, held))
    heads, opt, head_index = setup_heads(target)
    ids, probs, _ = head_targets(train, 2, head_index)
    h_ids, h_probs, h_greedy = head_targets(held, 2, head_index)
    assert (h_greedy[:, 0] >= 0).sum() == 16 * 11 and (h_greedy[:, 1] >= 0).sum() == 16 * 10
    with torch.no_grad():
        before = float(kl_loss(heads(held_f), h_ids, h_probs))
    top1_before = [row[0] for row in acceptance(heads, held_f, h_greedy, 1)]
    train_steps(heads, opt, feats, ids, probs, 0, 120, 120, 3e-2, 64, seed=0)
    after = float(kl_loss(heads(held_f), h_ids, h_probs))
    top1 = [row[0] for row in acceptance(heads, held_f, h_greedy, 1)]
    assert after < before - 0.3
    assert top1[0] > top1_before[0] + 0.2 and top1[1] > top1_before[1] + 0.1

    heads_b, opt_b, _ = setup_heads(target)                   # 60 steps, a "checkpoint", 60 more
    train_steps(heads_b, opt_b, feats, ids, probs, 0, 60, 120, 3e-2, 64, seed=0)
    state, opt_state = {k: v.clone() for k, v in heads_b.state_dict().items()}, opt_b.state_dict()
    heads_c, opt_c, _ = setup_heads(target)
    heads_c.load_state_dict(state)
    opt_c.load_state_dict(opt_state)
    train_steps(heads_c, opt_c, feats, ids, probs, 60, 120, 120, 3e-2, 64, seed=0)
    for (name, a), (_, c) in zip(heads.state_dict().items(), heads_c.state_dict().items()):
        assert torch.equal(a, c), name


def test_proposer_fills_the_tree_from_each_heads_ranking():
    target = tiny_target()
    heads, _, _ = setup_heads(target, 2)
    tree = topk_per_depth([3, 2])
    prop = MedusaProposer(heads, tree)
    prop.observe(torch.randn(4, 32))
    logits = heads(prop.hidden)
    proposal = prop.propose([1, 2, 3], 8, None, torch.Generator())
    first, second = logits[0].topk(3).indices.tolist(), logits[1].topk(2).indices.tolist()
    assert proposal.q is None and proposal.tree is tree
    assert proposal.tokens[:3] == first and proposal.tokens[3:] == second * 3
    assert prop.propose([1, 2, 3], 1, None, torch.Generator()).tree.size == 3      # cut to depth 1


def test_train_medusa_cli_then_medusa_decoding_equals_plain_greedy(grafted, tmp_path, tiny_dir, tiny_distill_dir):
    data = tiny_distill_dir
    out = tmp_path / "heads"
    flags = ["train-medusa", "--data", str(data), "--out", str(out), "--model", str(tiny_dir), "--heads", "3",
             "--head-tokens", "256", "--steps", "6", "--eval-every", "3", "--batch", "32", "--dtype", "fp32"]
    assert main(flags) == 0
    trees = json.loads((out / "trees.json").read_text())
    assert len(trees["acceptance"]) == 3 and set(trees["trees"]) == {"1", "2", "3", "4", "8", "16", "32", "64"}
    assert "| 1 | token t+2 |" in (out / "README.md").read_text()
    assert main(flags[:-2] + ["--dtype", "bf16"]) == 2        # other flags than the checkpoint's: refused

    from verispec.api import Target, make_engine
    from verispec.engine import GenerationConfig
    target = Target.load(str(tiny_dir), "fp32", "cpu")
    prompt = target.tokenizer.prompt_ids("Count to 7")
    cfg = GenerationConfig(max_new_tokens=24, k="auto", stop_token_ids=frozenset())
    plain = make_engine("plain", target).generate(prompt, cfg).token_ids
    for tree in ("auto", "8", "2,2,1"):
        engine = make_engine("medusa", target, str(out), tree=tree)
        assert engine.generate(prompt, cfg).token_ids == plain, tree
    assert not grafted                                       # "+ngram": the n-gram path merged into the tree
    prompt = target.tokenizer.prompt_ids("Say it again and again: cats and dogs, cats and dogs, cats and dogs")
    fixed = GenerationConfig(max_new_tokens=24, k=3, stop_token_ids=frozenset())
    plain = make_engine("plain", target).generate(prompt, fixed).token_ids
    assert make_engine("medusa", target, str(out), tree="8+ngram").generate(prompt, fixed).token_ids == plain
    assert grafted
    heads, _ = load_heads(out, target.model, torch.float32)
    assert heads.num_heads == 3
    assert main(["generate", "hi", "--model", str(tiny_dir), "--method", "medusa", "--draft", str(out),
                 "--tree", "1,1,1,1", "--dtype", "fp32"]) == 2          # deeper than the 3 heads
    assert main(["generate", "hi", "--model", str(tiny_dir), "--method", "medusa", "--dtype", "fp32"]) == 2


def test_typical_acceptance_is_greedy_at_temperature_0_and_lossy_above():
    from verispec.verify import verify_tree, verify_tree_typical
    tree = topk_per_depth([2, 1])                        # nodes: (0,), (1,), (0, 0), (1, 0)
    tokens = [2, 0, 1, 1]
    onehot = torch.zeros(5, 3)
    onehot[0, 0] = onehot[1, 1] = onehot[2, 1] = onehot[3, 2] = onehot[4, 0] = 1   # argmax at each node
    path, nxt = verify_tree_typical(onehot, tokens, tree, torch.tensor(0.5))
    assert path == [2, 4] and nxt == 0                   # the argmax path (1,) -> (1, 0), then p's argmax there
    p = torch.tensor([[0.5, 0.3, 0.2]] * 5)              # token 2 at p = 0.2 clears the bar min(0.09, ...)
    path, _ = verify_tree_typical(p, [2, 1, 0, 0], tree, torch.tensor(0.5))
    assert path == [1, 3]                                # always takes the first acceptable branch: lossy
    g = torch.Generator().manual_seed(0)
    firsts = [verify_tree(p, None, [2, 1, 0, 0], tree, torch.rand(5, generator=g), torch.rand((), generator=g))
              for _ in range(2000)]
    share = sum((f[0][:1] == [1]) for f in firsts) / 2000
    assert 0.15 < share < 0.25                           # exact rule: token 2 first with p(2) = 0.2
