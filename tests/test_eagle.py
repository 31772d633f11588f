"""EAGLE: the head, train-eagle (loss falls, resume, refusals), the proposer's chain / static / dynamic trees,
greedy output equal to plain decoding, and exact sampling (audit) on a tiny model."""
import json

import re

import pytest
import torch

from verispec.cli import main
from verispec.model.eagle import load_eagle
from verispec.proposers.eagle import EagleProposer
from verispec.sampling import SamplingConfig


@pytest.fixture(scope="module")
def tiny_eagle(tmp_path_factory, tiny_dir, tiny_distill_dir):
    out = tmp_path_factory.mktemp("eagle") / "head"
    flags = ["train-eagle", "--data", str(tiny_distill_dir), "--out", str(out), "--model", str(tiny_dir),
             "--head-tokens", "512", "--steps", "30", "--eval-every", "15", "--batch", "4", "--dtype", "fp32",
             "--lr", "3e-3"]
    assert main(flags) == 0
    return out, flags


def test_train_eagle_writes_a_head_card_and_acceptance_and_refuses_changed_flags(tiny_eagle):
    out, flags = tiny_eagle
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["verispec_eagle"] == 1 and len(cfg["acceptance"]) == 6 and len(cfg["acceptance"][0]) == 8
    history = cfg["history"]
    assert [h["step"] for h in history] == [15, 30] and history[1]["loss"] < history[0]["loss"]
    card = (out / "README.md").read_text()
    assert "smooth L1" in card and "| 1 |" in card
    assert main(flags[:-2] + ["--lr", "1e-3"]) == 2          # a checkpoint made with other flags: refused
    assert main(flags[:-4] + ["--noise", "-1"]) == 2


def test_resumed_training_equals_uninterrupted(tmp_path, tiny_dir, tiny_distill_dir):
    base = ["--data", str(tiny_distill_dir), "--model", str(tiny_dir), "--head-tokens", "256", "--batch", "2",
            "--dtype", "fp32", "--steps", "8", "--eval-every", "4"]
    assert main(["train-eagle", "--out", str(tmp_path / "a")] + base) == 0
    assert main(["train-eagle", "--out", f"{tmp_path / 'b'}/", "--stop-at", "4"] + base) == 0   # interrupted
    assert torch.load(tmp_path / "b.work" / "checkpoint.pt", weights_only=False)["step"] == 4    # beside OUT/
    assert not (tmp_path / "b").exists()
    assert main(["train-eagle", "--out", str(tmp_path / "b")] + base) == 0                     # resumed
    assert not (tmp_path / "b" / ".work").exists()
    from safetensors.torch import load_file
    a, b = load_file(str(tmp_path / "a" / "eagle.safetensors")), load_file(str(tmp_path / "b" / "eagle.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)      # deterministic in flags and seed


def test_a_checkpoint_is_refused_for_other_data_held_out_rows_or_target(tmp_path, tiny_dir, tiny_distill_dir,
                                                                       capsys, monkeypatch):
    """A run's checkpoint in OUT.work belongs to the data as it was (its shards), the held-out rows and the target:
    a rerun with any of them changed is refused in one line, before any features are read or made."""
    import shutil
    data = tmp_path / "data"
    shutil.copytree(tiny_distill_dir, data)
    base = ["train-eagle", "--data", str(data), "--out", str(tmp_path / "h"), "--model", str(tiny_dir),
            "--head-tokens", "256", "--batch", "2", "--dtype", "fp32", "--steps", "8", "--eval-every", "4"]
    assert main(base + ["--stop-at", "4"]) == 0
    capsys.readouterr()
    other_model = tmp_path / "tiny"
    shutil.copytree(tiny_dir, other_model)
    from verispec.train import features
    monkeypatch.setattr(features, "answer_features", lambda *a, **k: pytest.fail("features made"))   # refused first
    for flags in (["--eval-examples", "3"], ["--model", str(other_model)]):
        assert main(base + flags) == 2
        err = capsys.readouterr().err
        assert "made with other flags" in err and err.count("\n") == 1
    shutil.copy(next(data.glob("shard-*.pt")), data / "shard-99999.pt")      # distill-data went on meanwhile
    assert main(base) == 2 and "made with other flags" in capsys.readouterr().err


@pytest.mark.parametrize("train_mode", [False, True])
def test_unrolled_training_steps_see_what_drafting_sees(tiny_dir, tiny_eagle, train_mode):
    """The training-time test's step s at row j equals drafting s + 1 tokens after position j from the true
    features f_0..f_j, feeding the head's own predictions back (in eval and in train mode)."""
    from verispec.train.eagle import unrolled
    target, head, _ = load(tiny_dir, tiny_eagle[0])
    g = torch.Generator().manual_seed(0)
    n, steps = 12, 3
    f = torch.randn(2, n, head.cfg.hidden_size, generator=g)
    x = torch.randint(0, 500, (2, n), generator=g)
    positions = torch.arange(n)[None].expand(2, n)
    head.train(train_mode)
    with torch.no_grad():
        preds = unrolled(head, f, x, positions, steps)
        head.eval()
        for b in range(2):
            for j in (0, 4, n - steps):
                cache = head.new_cache(n + steps)
                pred = head(f[b:b + 1, :j + 1], x[b:b + 1, :j + 1], positions[:1, :j + 1], cache)[:, -1:]
                for s in range(steps):
                    torch.testing.assert_close(pred[0, 0], preds[s][b, j], atol=1e-5, rtol=1e-4)
                    if s + 1 < steps:
                            pred = head(pred, x[b:b + 1, j + s + 1:j + s + 2], torch.tensor([[j + s + 1]]), cache)


def test_unrolled_training_lowers_the_loss(tmp_path, tiny_dir, tiny_distill_dir):
    out = tmp_path / "u"
    assert main(["train-eagle", "--data", str(tiny_distill_dir), "--out", str(out), "--model", str(tiny_dir),
                 "--head-tokens", "256", "--batch", "2", "--dtype", "fp32", "--steps", "20", "--eval-every", "10",
                 "--lr", "3e-3", "--unroll", "3"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["history"][1]["loss"] < cfg["history"][0]["loss"]
    assert "training-time test over 3 draft steps" in (out / "README.md").read_text()


def test_length_groups_batch_sequences_of_one_span_and_train(monkeypatch, tmp_path, tiny_dir, tiny_distill_dir):
    from verispec.train import eagle as train
    feats = [torch.zeros(n, 4) for n in (5, 40, 7, 300, 33, 290, 2)]
    groups = train.length_groups(feats, 32)
    assert groups == [[0, 2, 6], [1, 4], [0, 2, 6], [3, 5], [1, 4], [3, 5], [0, 2, 6]]
    monkeypatch.setattr(train, "eagle_loss", lambda *a, **k: (torch.zeros(()), {}))
    monkeypatch.setattr(train, "descend", lambda *a: None)
    head = torch.nn.Linear(1, 1)
    opt = torch.optim.SGD(head.parameters(), lr=1e-3)
    for grouped in (None, groups):
        seen = []
        monkeypatch.setattr(train, "pad_batch", lambda f, t, head: seen.append({len(x) // 32 for x in f}) or (f, t))
        train.train_steps(head, opt, feats, feats, 0, 40, 40, 1e-3, 3, 0, 0.5, 0.0, groups=grouped)
        assert len(seen) == 40
        assert all(len(spans) == 1 for spans in seen) == (grouped is not None)   # without groups, mixed batches
    assert {next(iter(s)) for s in seen} == {0, 1, 9}
    monkeypatch.undo()
    out = tmp_path / "g"                # and the command trains with it, saying so on the card
    assert main(["train-eagle", "--data", str(tiny_distill_dir), "--out", str(out), "--model", str(tiny_dir),
                 "--head-tokens", "256", "--batch", "2", "--dtype", "fp32", "--steps", "4", "--eval-every", "4",
                 "--group-lengths", "16"]) == 0
    assert "16-token span of lengths" in (out / "README.md").read_text()
    assert main(["train-eagle", "--data", str(tiny_distill_dir), "--out", str(out), "--model", str(tiny_dir),
                 "--group-lengths", "-1"]) == 2


def load(tiny_dir, out):
    from verispec.api import Target
    target = Target.load(str(tiny_dir), "fp32", "cpu")
    head, cfg = load_eagle(out, target.model, torch.float32)
    return target, head, cfg


@pytest.mark.parametrize("tree", [None, "dynamic", "dynamic:6", "dynamic:6+ngram", "4", "2,1,1", "4+ngram"])
def test_eagle_greedy_equals_plain(grafted, tiny_dir, tiny_eagle, tree):
    from verispec.api import Target, make_engine
    from verispec.engine import GenerationConfig
    target = Target.load(str(tiny_dir), "fp32", "cpu")
    cfg = GenerationConfig(max_new_tokens=24, k="auto", stop_token_ids=frozenset())
    for text in ("Count to 7", "Say something nice about cats and dogs, cats and dogs, cats and dogs"):
        prompt = target.tokenizer.prompt_ids(text)
        plain = make_engine("plain", target).generate(prompt, cfg).token_ids
        g = make_engine("eagle", target, str(tiny_eagle[0]), tree=tree).generate(prompt, cfg)
        assert g.token_ids == plain, (tree, text)
        assert g.stats.drafted_tokens > 0
    assert bool(grafted) == ("+ngram" in str(tree))


@pytest.mark.parametrize("tree", ["dynamic:6+ngram", "4+ngram"])
def test_a_copied_continuation_verified_alone_keeps_greedy_output(copied, monkeypatch, tiny_dir, tiny_eagle, tree):
    """Where the context's last tokens occurred before, "+ngram" trees verify the continuation alone (a chain of
    deterministic picks in place of the tree): the output is still plain decoding's. (2 repeated tokens are made
    enough, so that the tiny model's short output copies.)"""
    from verispec.api import Target, make_engine
    from verispec.engine import GenerationConfig
    from verispec.proposers import ngram
    monkeypatch.setattr(ngram, "SURE", 2)
    target = Target.load(str(tiny_dir), "fp32", "cpu")
    cfg = GenerationConfig(max_new_tokens=24, k="auto", stop_token_ids=frozenset())
    prompt = target.tokenizer.prompt_ids("cats and dogs, cats and dogs, cats and dogs, cats and")
    plain = make_engine("plain", target).generate(prompt, cfg).token_ids
    assert make_engine("eagle", target, str(tiny_eagle[0]), tree=tree).generate(prompt, cfg).token_ids == plain
    assert copied


def test_a_dynamic_trees_prior_yield_is_the_best_static_tree_of_its_size(tiny_dir, tiny_eagle):
    from verispec.api import Target, eagle_proposer
    from verispec.tree import tree_from_acceptance
    target = Target.load(str(tiny_dir), "fp32", "cpu")
    _, cfg = load_eagle(tiny_eagle[0], target.model, torch.float32)
    prop = eagle_proposer(target, str(tiny_eagle[0]), "dynamic:6+ngram")
    assert prop.expected_accepted == pytest.approx(tree_from_acceptance(cfg["acceptance"], 6)[1])
    assert prop.graft > 0 and prop.max_nodes == 6 + prop.graft
    assert eagle_proposer(target, str(tiny_eagle[0])).expected_accepted is None          # a chain: alpha's


def test_a_static_tree_has_its_heads_yield_and_auto_k_gates_or_cuts_it(tiny_dir, tiny_eagle):
    """A static EAGLE tree's prior yield comes from the head's measured acceptance, so `--k auto` verifies it (with
    a grafted n-gram path, whole; without, cut to the depth that pays) or decodes plainly, whichever the cost model
    predicts faster (it always drafted before: 0.90x plain in gguf-q8 on an AVX2-only CPU, where the head costs
    0.3 of a pass)."""
    from verispec.api import Target, eagle_proposer
    from verispec.autok import CostProfile
    from verispec.autotree import AutoCut, AutoTree
    from verispec.engine import GenerationConfig, Sequence
    from verispec.tree import expected_accepted
    target = Target.load(str(tiny_dir), "fp32", "cpu")
    _, cfg = load_eagle(tiny_eagle[0], target.model, torch.float32)
    prop = eagle_proposer(target, str(tiny_eagle[0]), "4+ngram")
    assert prop.expected_accepted == pytest.approx(expected_accepted(prop.tree, cfg["acceptance"]))
    prompt = target.tokenizer.prompt_ids("Hi")
    cheap = CostProfile(tree_curve={4: 1.1, 8: 1.2}, draft_cost={"eagle": 0.01})
    seq = Sequence(target.model, prop, prompt, GenerationConfig(max_new_tokens=4, k="auto"), cheap)
    assert isinstance(seq.auto, AutoTree) and seq.auto.depth == prop.tree.depth
    assert seq.auto.mean_accepted == pytest.approx(prop.expected_accepted)
    # open, it asks for k_max, not the tree's depth: a lookup chain verified in the tree's place (or a grafted
    # path) may run that long, as without the gate (k = depth cut them to 3 tokens)
    assert seq.auto.next_k() == GenerationConfig().k_max > prop.tree.depth
    bare = eagle_proposer(target, str(tiny_eagle[0]), "4")                  # no graft: the tree's depth at most
    cut = Sequence(target.model, bare, prompt, GenerationConfig(max_new_tokens=4, k="auto"), cheap).auto
    first = sum(r for c, r in bare.node_reach.items() if len(c) == 1)
    assert isinstance(cut, AutoCut) and cut.reach()[0] == pytest.approx(first)
    best = cut.trees[cut.gains().index(max(cut.gains()))]
    assert cut.next_k() == best.depth <= bare.tree.depth and cut.tree_for(best.depth) is best
    dear = CostProfile(tree_curve={4: 1.1, 8: 1.2}, draft_cost={"eagle": 3.0})      # no yield repays 4 passes
    seq = Sequence(target.model, prop, prompt, GenerationConfig(max_new_tokens=4, k="auto"), dear)
    assert seq.auto.next_k() == 0


def test_dynamic_tree_keeps_the_most_confident_nodes_parents_first(tiny_dir, tiny_eagle):
    target, head, _ = load(tiny_dir, tiny_eagle[0])
    prop = EagleProposer(head, "dynamic", nodes=7, depth=4, expand=3)
    prop.prepare(64)
    context = target.tokenizer.prompt_ids("Count to 7")
    with torch.inference_mode():
        prop.observe(target.model(torch.tensor([context[:-1]]), torch.arange(len(context) - 1)[None], None)[0])
    proposal = prop.propose(context, 4, SamplingConfig(0.0), torch.Generator())
    tree = proposal.tree
    assert tree.size == 7 and proposal.q is None and len(proposal.tokens) == 7
    assert all(tree.parents[i] < i for i in range(1, 8))                     # a valid breadth-first tree
    # depth-1 nodes are the head's top choices for the next token, in rank order
    first = [t for t, d in zip(proposal.tokens, tree.depths[1:]) if d == 1]
    with torch.inference_mode():
        cache = head.new_cache(64)
        f = head(target.model(torch.tensor([context[:-1]]), torch.arange(len(context) - 1)[None], None),
                 torch.tensor([context[1:]]), torch.arange(len(context) - 1)[None], cache)[0, -1]
    top = head.head_ids[head.logits(f).topk(len(first)).indices].tolist()
    assert first == top
    assert prop.cache.length == prop.fed                                     # draft entries dropped
    again = prop.propose(context, 4, SamplingConfig(0.0), torch.Generator())  # nothing new observed since
    assert again.tokens == proposal.tokens and again.tree.choices == tree.choices


@pytest.mark.parametrize("shape", [(4,), (2, 1, 1), (3, 2, 2, 1)])
def test_a_static_tree_drafted_on_the_device_is_the_host_ranked_one(monkeypatch, tiny_dir, tiny_eagle, shape):
    """Static trees are drafted on the device and left there for the engine's one read; the tokens are those the
    host-ranked drafting (`_tree`, the older way) chooses, after prompts that leave the cache at other lengths."""
    from verispec.proposers import eagle
    from verispec.tree import topk_per_depth
    target, head, _ = load(tiny_dir, tiny_eagle[0])
    tree = topk_per_depth(list(shape))
    for text in ("Count to 7", "Name three colours of the sea, please"):
        context = target.tokenizer.prompt_ids(text)
        got = {}
        for host in (False, True):
            monkeypatch.setattr(eagle, "_HOST_RANKED", [host])
            prop = EagleProposer(head, "static", tree=tree)
            prop.prepare(64)
            with torch.inference_mode():
                prop.observe(target.model(torch.tensor([context[:-1]]), torch.arange(len(context) - 1)[None],
                                          None)[0])
            got[host] = prop.propose(context, len(shape), SamplingConfig(0.0), torch.Generator())
            assert prop.cache.length == prop.fed                             # draft entries dropped
        assert got[False].on_device is not None and got[False]._tokens is None      # not read back yet
        assert got[False].tokens == got[True].tokens and got[False].tree == got[True].tree == tree


@pytest.mark.parametrize("nodes,depth,expand", [(7, 4, 3), (12, 5, 4), (3, 2, 2), (8, 1, 4)])
def test_a_dynamic_tree_drafted_on_the_device_is_the_host_ranked_one(monkeypatch, tiny_dir, tiny_eagle, nodes, depth,
                                                                       expand):
    """Dynamic trees are drafted on the device and read back once; the tree and tokens are those the host-ranked
    drafting (`_tree`) chooses, and the head's cache is left as it was."""
    from verispec.proposers import eagle
    target, head, _ = load(tiny_dir, tiny_eagle[0])
    for text in ("Count to 7", "Name three colours of the sea, please"):
        context = target.tokenizer.prompt_ids(text)
        got = {}
        for host in (False, True):
            monkeypatch.setattr(eagle, "_HOST_RANKED", [host])
            prop = EagleProposer(head, "dynamic", nodes=nodes, depth=depth, expand=expand)
            prop.prepare(64)
            with torch.inference_mode():
                prop.observe(target.model(torch.tensor([context[:-1]]), torch.arange(len(context) - 1)[None],
                                          None)[0])
            got[host] = prop.propose(context, depth, SamplingConfig(0.0), torch.Generator())
            assert prop.cache.length == prop.fed                             # draft entries dropped
        assert got[False].tree.size == min(nodes, expand if depth == 1 else nodes)
        assert got[False].tokens == got[True].tokens and got[False].tree.choices == got[True].tree.choices


@pytest.mark.parametrize("shape", [(4,), (2, 1, 1), (3, 2, 2, 1), (8, 4, 2, 1), "dynamic", "dynamic:3", "chain",
                                   "chain:1"])
def test_a_tree_drafted_in_one_graph_is_the_pass_by_pass_one(monkeypatch, tiny_dir, tiny_eagle, shape):
    """On a graphed device a tree's whole draft is one replayed graph (`DraftGraph`); here uncaptured, on the CPU.
    Its tokens are bit for bit those of drafting depth by depth through the graphed head passes, for static and
    dynamic trees and for chains (greedy, and sampled at T = 1 with their q), after contexts that leave the head's
    cache at several lengths, and the draft entries are dropped again."""
    from verispec.model import graphs
    from verispec.proposers import eagle
    from verispec.tree import topk_per_depth
    monkeypatch.setattr(graphs, "_everywhere", [True])
    target, head, _ = load(tiny_dir, tiny_eagle[0])
    tree = None if isinstance(shape, str) else topk_per_depth(list(shape))
    text = "Name three colours of the sea, and then count from one to twenty, please"
    full = target.tokenizer.prompt_ids(text)
    with torch.inference_mode():
        feats = target.model(torch.tensor([full]), torch.arange(len(full))[None], None)[0]      # [n, D]
    got = {}
    for one in (True, False):
        monkeypatch.setattr(eagle, "_ONE_GRAPH", [one])
        if shape == "chain" or shape == "chain:1":
            prop = EagleProposer(head)
        elif tree is None:
            prop = EagleProposer(head, "dynamic", nodes=9, depth=4, expand=int(shape[8:] or 4))
        else:
            prop = EagleProposer(head, "static", tree=tree)
        prop.prepare(128)
        got[one], seen = [], 0
        for end in (6, 9, 10, 17, len(full)):                     # accepted runs of several lengths
            prop.observe(feats[seen:end - 1])
            seen = end - 1
            sampling = SamplingConfig(1.0 if shape == "chain:1" else 0.0)
            proposal = prop.propose(full[:end], 4 if tree is None else len(shape), sampling,
                                    torch.Generator().manual_seed(end))
            if proposal.tree is None:                             # a chain: its tokens and q
                got[one].append((proposal.tokens, proposal.q.tolist()))
            else:
                got[one].append((proposal.tokens, proposal.tree.choices))
            assert prop.cache.length == prop.fed                 # draft entries dropped
        assert bool(prop.graphs) == one                          # the one-graph path ran (or not)
    assert got[True] == got[False] and all(len(t) == len(c) > 1 for t, c in got[True])
    if shape == "chain:1":
        assert len({tuple(t) for t, _ in got[True]}) > 1                      # sampled: not one fixed answer


def test_drafting_logits_are_row_invariant_and_training_still_has_gradients(tiny_dir, tiny_eagle):
    from verispec.api import Target
    target = Target.load(str(tiny_dir), "bf16", "cpu")
    head, _ = load_eagle(tiny_eagle[0], target.model, torch.bfloat16)
    feats = torch.randn(3, target.model.cfg.hidden_size, dtype=torch.bfloat16)
    with torch.inference_mode():
        rows = head.logits(feats)
        assert all(torch.equal(rows[i], head.logits(feats[i])) for i in range(3))      # each row as if alone
        torch.testing.assert_close(rows, (feats.float() @ head.out.float().T), atol=1e-3, rtol=1e-3)
        assert head.logits(feats[0]).shape == (len(head.head_ids),)
    trainable, _ = load_eagle(tiny_eagle[0], target.model, torch.float32)    # what train-eagle --init loads
    trainable.logits(torch.randn(2, target.model.cfg.hidden_size, requires_grad=True)).sum().backward()
    assert trainable.fc.weight.requires_grad


def test_chain_q_is_the_heads_distribution_zero_outside_its_tokens(tiny_dir, tiny_eagle):
    target, head, _ = load(tiny_dir, tiny_eagle[0])
    prop = EagleProposer(head)
    prop.prepare(64)
    context = target.tokenizer.prompt_ids("Count to 7")
    with torch.inference_mode():
        prop.observe(target.model(torch.tensor([context[:-1]]), torch.arange(len(context) - 1)[None], None)[0])
    proposal = prop.propose(context, 3, SamplingConfig(1.0), torch.Generator().manual_seed(0))
    assert len(proposal.tokens) == 3 and proposal.q.shape == (3, target.model.cfg.vocab_size)
    torch.testing.assert_close(proposal.q.sum(-1), torch.ones(3))
    outside = torch.ones(target.model.cfg.vocab_size, dtype=torch.bool)
    outside[head.head_ids] = False
    assert float(proposal.q[:, outside].sum()) == 0.0
    assert all(proposal.q[i, t] > 0 for i, t in enumerate(proposal.tokens))


EAGLE_AUDIT = ["--samples", "300", "--tokens", "3", "--dtype", "fp32", "--temperature", "0.004"]


@pytest.mark.parametrize("tree", ["chain", "dynamic", "dynamic+ngram"])
def test_eagle_sampling_passes_the_audit(capsys, tiny_dir, tiny_eagle, tree):
    """The tiny random target's logits are tiny (std ~0.02): at T = 0.004 its next-token laws are peaked, so the
    audit's tables have several cells per position (at T = 1 they are near uniform and pooled into one cell: a
    test that could not fail, which the audit now refuses to call a PASS)."""
    code = main(["audit", "--model", str(tiny_dir), "--method", "eagle", "--draft", str(tiny_eagle[0]), "--tree",
                 tree] + EAGLE_AUDIT)
    out = capsys.readouterr().out
    assert code == 0 and "PASS" in out, out
    assert max(int(d) for d in re.findall(r"dof = +(\d+)", out)) >= 2, out


def test_eagle_copying_the_context_passes_the_audit(copied, capsys):
    """The audit at T = 1 on the default model, where "+ngram" often verifies a repeated suffix's continuation
    alone (in place of the tree): still the target's distribution."""
    code = main(["audit", "--method", "eagle", "--tree", "dynamic+ngram", "--k", "3", "--no-chat", "--prompt",
                 "the cat sat on the mat. " * 3 + "the cat sat on", "--samples", "200", "--tokens", "3",
                 "--temperature", "1"])
    out = capsys.readouterr().out
    assert code == 0 and "PASS" in out, out
    assert len(copied) > 50


def test_the_copying_audit_fails_a_planted_bias(copied, capsys, monkeypatch):
    """The same audit FAILS when a rejected copy's recovered token is drawn from p, not from norm(max(0, p - q)):
    the rejected token can come back."""
    import verispec.engine
    from verispec.sampling import sample
    chain = verispec.engine.verify_chain

    def from_p(p, q, draft, u_accept, u_final, num_draft=None):
        n, nxt = chain(p, q, draft, u_accept, u_final, num_draft)
        if q is not None or draft.shape[1] == 0 or int(n[0]) == draft.shape[1]:
            return n, nxt
        return n, sample(p[0, int(n[0])][None], u_final)
    monkeypatch.setattr(verispec.engine, "verify_chain", from_p)
    main(["audit", "--method", "eagle", "--tree", "dynamic+ngram", "--k", "3", "--no-chat", "--prompt",
          "the cat sat on the mat. " * 3 + "the cat sat on", "--samples", "200", "--tokens", "3", "--temperature", "1"])
    out = capsys.readouterr().out
    assert "FAIL" in out and copied, out


@pytest.mark.parametrize("tree", ["chain", "dynamic"])
def test_eagle_audit_fails_a_planted_bias(capsys, tiny_dir, tiny_eagle, tree, monkeypatch):
    """The same audit FAILS when the verifier's wiring is wrong: a chain takes the argmax at the end of every
    speculative cycle; a tree emits the draw at the root where its accepted path ends deeper."""
    import verispec.engine
    chain, walk = verispec.engine.verify_chain, verispec.engine.greedy_tree

    def greedy_chain(p, q, draft, u_accept, u_final, num_draft=None):
        n, nxt = chain(p, q, draft, u_accept, u_final, num_draft)
        if draft.shape[1] == 0:                                    # plain steps stay honest
            return n, nxt
        return n, p[torch.arange(p.shape[0]), n].argmax(-1)

    def root_draw(top, tokens, tree_):
        path, nxt = walk(top, tokens, tree_)
        return path, top[0] if path else nxt
    monkeypatch.setattr(verispec.engine, "verify_chain", greedy_chain)
    monkeypatch.setattr(verispec.engine, "greedy_tree", root_draw)
    code = main(["audit", "--model", str(tiny_dir), "--method", "eagle", "--draft", str(tiny_eagle[0]), "--tree",
                 tree] + EAGLE_AUDIT)
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out, out


def test_bad_eagle_flags_get_one_line_errors(capsys, tiny_dir, tiny_eagle):
    assert main(["generate", "hi", "--model", str(tiny_dir), "--method", "eagle", "--dtype", "fp32"]) == 2
    assert "needs --draft" in capsys.readouterr().err
    assert main(["generate", "hi", "--model", str(tiny_dir), "--method", "eagle", "--draft", str(tiny_eagle[0]),
                 "--tree", "dynamic:0", "--dtype", "fp32"]) == 2
    assert "dynamic:N" in capsys.readouterr().err
    assert main(["generate", "hi", "--model", str(tiny_dir), "--method", "eagle", "--draft", str(tiny_eagle[0]),
                 "--tree", "dynamic+medusa", "--dtype", "fp32"]) == 2
    assert "+ngram" in capsys.readouterr().err
    assert main(["generate", "hi", "--model", str(tiny_dir), "--method", "eagle", "--draft", str(tiny_dir),
                 "--dtype", "fp32"]) == 2
    assert "cannot load the EAGLE head" in capsys.readouterr().err


def test_a_head_on_fused_layers_trains_and_is_refused_for_drafting(capsys, tmp_path, tiny_dir, tiny_distill_dir):
    out = tmp_path / "fused"
    base = ["train-eagle", "--data", str(tiny_distill_dir), "--model", str(tiny_dir), "--head-tokens", "256",
            "--batch", "2", "--dtype", "fp32", "--steps", "20", "--eval-every", "10", "--lr", "3e-3"]
    assert main(base + ["--out", str(out), "--feature-layers", "0,1,final"]) == 0
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["feature_taps"] == [0, 1] and cfg["history"][1]["loss"] < cfg["history"][0]["loss"]
    assert "decoder layers 0, 1" in (out / "README.md").read_text()
    capsys.readouterr()
    assert main(["generate", "hi", "--model", str(tiny_dir), "--method", "eagle", "--draft", str(out)]) == 2
    assert "final feature only" in capsys.readouterr().err
    for bad in ("x", "0,0", "99", ""):
        assert main(base + ["--out", str(tmp_path / "bad"), "--feature-layers", bad]) == 2
    assert main(base + ["--out", str(tmp_path / "bad"), "--feature-layers", "1", "--init", str(out)]) == 2


def test_init_fine_tunes_a_trained_head(tmp_path, tiny_dir, tiny_distill_dir, tiny_eagle):
    """--init starts from a trained head (its weights and head tokens): its first held-out loss is already
    below that of the same run from scratch."""
    base = ["train-eagle", "--data", str(tiny_distill_dir), "--model", str(tiny_dir), "--batch", "2", "--dtype",
            "fp32", "--steps", "4", "--eval-every", "2", "--lr", "3e-3", "--head-tokens", "512"]
    assert main(base + ["--out", str(tmp_path / "scratch")]) == 0
    assert main(base + ["--out", str(tmp_path / "tuned"), "--init", str(tiny_eagle[0]), "--head-tokens", "64"]) == 0
    scratch = json.loads((tmp_path / "scratch" / "config.json").read_text())
    tuned = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert tuned["history"][0]["loss"] < scratch["history"][0]["loss"]
    from safetensors.torch import load_file
    ids = [load_file(str(folder / "eagle.safetensors"))["head_ids"] for folder in (tiny_eagle[0], tmp_path / "tuned")]
    assert torch.equal(*ids)                                        # the trained head's tokens, kept
    card = (tmp_path / "tuned" / "README.md").read_text()
    assert "started from the trained head" in card
    assert len(ids[1]) != 64                                        # (the --head-tokens given, which --init ignores)
    assert f"rows of the {len(ids[1])} most frequent answer tokens of the initial head's data" in card


def test_a_bad_init_leaves_no_work_folder(capsys, tmp_path, tiny_dir, tiny_distill_dir):
    """A run that fails before its work folder holds anything leaves no empty OUT.work behind (found by fuzzing)."""
    (tmp_path / "empty").mkdir()
    assert main(["train-eagle", "--data", str(tiny_distill_dir), "--model", str(tiny_dir), "--dtype", "fp32",
                 "--steps", "2", "--out", str(tmp_path / "h"), "--init", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("verispec: error:") and err.count("\n") == 1
    assert not (tmp_path / "h").exists() and not (tmp_path / "h.work").exists()


def test_eagle1_layout_trains_and_drafts_exactly(tmp_path, tiny_dir, tiny_distill_dir):
    """--layout eagle1 (no input norm, no final norm: what vLLM's and SGLang's EAGLE run) trains, loads and drafts
    (op by op: the one-call layer kernel needs the input norm) with greedy output equal to plain decoding."""
    from verispec.api import Target, make_engine
    from verispec.engine import GenerationConfig
    out = tmp_path / "e1"
    assert main(["train-eagle", "--data", str(tiny_distill_dir), "--out", str(out), "--model", str(tiny_dir),
                 "--head-tokens", "256", "--steps", "4", "--eval-every", "4", "--batch", "2", "--dtype", "fp32",
                 "--layout", "eagle1"]) == 0
    assert json.loads((out / "config.json").read_text())["eagle_layout"] == "eagle1"
    assert "EAGLE-1's layout" in (out / "README.md").read_text()
    target = Target.load(str(tiny_dir), "fp32", "cpu")
    head, _ = load_eagle(out, target.model, torch.float32)
    assert head.layout == "eagle1"
    assert [k for k in head.state_dict() if "norm" in k] == ["decoder.layers.0.mlp_norm.weight"]
    cfg = GenerationConfig(max_new_tokens=16, k="auto", stop_token_ids=frozenset())
    prompt = target.tokenizer.prompt_ids("Count to 7")
    plain = make_engine("plain", target).generate(prompt, cfg).token_ids
    for tree in (None, "dynamic"):
        assert make_engine("eagle", target, str(out), tree=tree).generate(prompt, cfg).token_ids == plain


def test_a_narrower_head_trains_loads_and_drafts_exactly(tmp_path, tiny_dir, tiny_distill_dir):
    """--intermediate sets the head's SwiGLU width (a wide target's head need not copy its FFN): the head is
    written with it, loads with it, and drafts with greedy output equal to plain decoding; a bad width, or one
    that contradicts --init's head, is a one-line error."""
    from verispec.api import Target, make_engine
    from verispec.engine import GenerationConfig
    out = tmp_path / "narrow"
    base = ["train-eagle", "--data", str(tiny_distill_dir), "--model", str(tiny_dir), "--head-tokens", "256",
            "--steps", "4", "--eval-every", "4", "--batch", "2", "--dtype", "fp32"]
    assert main(base + ["--out", str(out), "--intermediate", "64"]) == 0
    assert json.loads((out / "config.json").read_text())["intermediate_size"] == 64
    target = Target.load(str(tiny_dir), "fp32", "cpu")
    head, _ = load_eagle(out, target.model, torch.float32)
    assert head.decoder.layers[0].mlp.w2.weight.shape[1] == 64 != target.model.cfg.intermediate_size
    cfg = GenerationConfig(max_new_tokens=16, k=3, stop_token_ids=frozenset())
    prompt = target.tokenizer.prompt_ids("Count to 7")
    plain = make_engine("plain", target).generate(prompt, cfg).token_ids
    assert make_engine("eagle", target, str(out)).generate(prompt, cfg).token_ids == plain
    assert main(base + ["--out", str(tmp_path / "bad"), "--intermediate", "0"]) == 2
    assert main(base + ["--out", str(tmp_path / "bad2"), "--intermediate", "32", "--init", str(out)]) == 2
