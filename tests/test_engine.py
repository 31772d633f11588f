"""The decoding loop on the real model (fp32): greedy equality for every method, seeding, stop handling."""
import pytest

from verispec.engine import Engine, GenerationConfig
from verispec.model import loader
from verispec.proposers.draft_model import DraftModelProposer
from verispec.proposers.ngram import NgramProposer
from verispec.sampling import SamplingConfig

PROMPTS = [
    "Summarize in one sentence: The city council met on Tuesday to discuss the new park. Residents asked for "
    "more trees and benches, and the council agreed to plant fifty trees next spring.",
    "Rewrite this sentence in the passive voice: The cat chased the mouse around the kitchen.",
    "Write a Python function that returns the squares of a list of numbers.",
    "Fix the bug in this code:\n\ndef add(a, b):\n    return a - b",
    "What are the names of some famous actors that started their careers on Broadway?",
    "Explain why the sky is blue in two sentences.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?",
    "A train travels 60 miles per hour for 3 hours. How far does it go?",
    "List three uses of a paperclip.",
    "Translate to French: Good morning, how are you today?",
]
MAX_NEW = 32


@pytest.fixture(scope="module")
def plain_outputs(target_fp32):
    model, tok = target_fp32
    engine = Engine(model)
    cfg = GenerationConfig(max_new_tokens=MAX_NEW, stop_token_ids=tok.stop_token_ids)
    return [engine.generate(tok.prompt_ids(p), cfg).token_ids for p in PROMPTS]


def check_greedy_equal(model, tok, proposer, plain_outputs, k):
    engine = Engine(model, proposer)
    cfg = GenerationConfig(max_new_tokens=MAX_NEW, k=k, stop_token_ids=tok.stop_token_ids)
    drafted = accepted = 0
    for prompt, expected in zip(PROMPTS, plain_outputs):
        g = engine.generate(tok.prompt_ids(prompt), cfg)
        assert g.token_ids == expected, prompt
        drafted += g.stats.drafted_tokens
        accepted += g.stats.accepted_tokens
    return drafted, accepted


def test_ngram_greedy_equals_plain(target_fp32, plain_outputs):
    drafted, accepted = check_greedy_equal(*target_fp32, NgramProposer(), plain_outputs, k=4)
    assert accepted > 0 and drafted > accepted          # both branches of the rule were exercised


def test_draft_model_greedy_equals_plain(target_fp32, plain_outputs, truncated_draft_dir):
    draft, _, _ = loader.load(truncated_draft_dir, "fp32")
    drafted, accepted = check_greedy_equal(*target_fp32, DraftModelProposer(draft), plain_outputs, k=3)
    assert accepted > 0 and drafted > accepted


def test_shipped_draft_greedy_equals_plain_with_auto_k(target_fp32, plain_outputs):
    from verispec.api import DEFAULT_DRAFT
    model, tok = target_fp32
    draft, _, _ = loader.load(DEFAULT_DRAFT, "fp32", need_tokenizer=False, target_embedding=model.embed.weight)
    assert draft.cfg.head_tokens and draft.cfg.embed_from_target        # the reduced head, the borrowed embedding
    drafted, accepted = check_greedy_equal(model, tok, DraftModelProposer(draft), plain_outputs, k="auto")
    assert accepted > 0 and drafted > accepted


def test_ngram_greedy_equals_plain_with_auto_k(target_fp32, plain_outputs):
    drafted, accepted = check_greedy_equal(*target_fp32, NgramProposer(), plain_outputs, k="auto")
    assert accepted > 0


def test_self_draft_accepts_everything_and_earns_bonus_tokens(target_fp32, plain_outputs):
    model, tok = target_fp32
    drafted, accepted = check_greedy_equal(model, tok, DraftModelProposer(model), plain_outputs[:3], k=5)
    assert 0 < accepted <= drafted < accepted + 3 * 5    # uncounted: only drafts past a stop token (one cycle each)


def test_seeded_sampling_is_reproducible_and_seed_dependent(target_fp32, truncated_draft_dir):
    model, tok = target_fp32
    draft, _, _ = loader.load(truncated_draft_dir, "fp32")
    engine = Engine(model, DraftModelProposer(draft))
    ids = tok.prompt_ids(PROMPTS[5])
    run = lambda seed: engine.generate(ids, GenerationConfig(  # noqa: E731
        max_new_tokens=24, seed=seed, sampling=SamplingConfig(temperature=1.0, top_p=0.95))).token_ids
    first = run(1)
    assert run(1) == first
    assert any(run(s) != first for s in (2, 3, 4))


def test_stop_token_ends_generation_and_is_not_emitted(target_fp32):
    model, tok = target_fp32
    g = Engine(model, NgramProposer()).generate(tok.prompt_ids("Say hi."), GenerationConfig(
        max_new_tokens=200, stop_token_ids=tok.stop_token_ids))
    assert g.finish_reason == "stop" and not set(g.token_ids) & tok.stop_token_ids
    assert len(g.token_ids) < 200


def test_length_budget_is_exact_with_speculation(target_fp32):
    model, tok = target_fp32
    for budget in (1, 2, 5, 9):
        g = Engine(model, DraftModelProposer(model)).generate(
            tok.prompt_ids(PROMPTS[2]), GenerationConfig(max_new_tokens=budget, k=4))
        assert len(g.token_ids) == budget and g.finish_reason == "length"


def test_statistics_add_up(target_fp32):
    model, tok = target_fp32
    g = Engine(model, NgramProposer()).generate(tok.prompt_ids(PROMPTS[0]), GenerationConfig(max_new_tokens=40))
    s = g.stats.to_dict()
    assert s["new_tokens"] == len(g.token_ids) == 40
    assert s["accepted_tokens"] == sum(i * c for i, c in enumerate(s["accepted_length_histogram"]))
    assert abs(s["mean_accepted_tokens"] * (s["target_passes"] - 1) - (40 - 1)) < 1e-9
    assert s["checked_tokens"] <= s["drafted_tokens"]
    assert s["time_total_s"] >= s["time_draft_s"] + s["time_verify_s"]


def test_statistics_count_no_draft_past_a_stop_token(target_fp32):
    """A draft of the model itself accepts all 8 tokens a cycle; the cycle that meets the stop token counts only
    the drafts up to it: every counted accepted draft is an output token (or the stop token itself)."""
    model, tok = target_fp32
    g = Engine(model, DraftModelProposer(model)).generate(tok.prompt_ids("Say hi."), GenerationConfig(
        max_new_tokens=200, k=8, stop_token_ids=tok.stop_token_ids))
    s, cycles = g.stats, g.stats.target_passes - 1
    assert g.finish_reason == "stop" and cycles > 0
    produced = len(g.token_ids)                      # the stop token counted, the prefill's token not
    assert produced - cycles <= s.accepted_tokens <= produced - cycles + 1
    assert s.acceptance_rate == 1.0 and s.accepted_tokens == sum(s.accepted_by_position)


def test_a_request_may_fill_the_context_with_speculation(tiny_dir):
    """Prompt plus max-new-tokens may fill the model's context exactly, as with plain decoding: near the end a
    tree wider than the room left waits (decoded plainly), and the output is plain decoding's."""
    from verispec.proposers.draft_tree import DraftTreeProposer
    model, tok, _ = loader.load(tiny_dir, "fp32")
    limit = model.cfg.max_position
    ids = tok.encode("one" + " one" * 480)
    cfg = GenerationConfig(max_new_tokens=limit - len(ids), k=6)
    plain = Engine(model).generate(ids, cfg).token_ids
    assert len(plain) == limit - len(ids)
    for proposer in (NgramProposer(), DraftModelProposer(model), DraftTreeProposer(model)):
        g = Engine(model, proposer).generate(ids, cfg)
        assert g.token_ids == plain and g.stats.accepted_tokens > 0, proposer.name


def test_prefix_reuse_gives_the_same_output(target_fp32):
    model, tok = target_fp32
    engine = Engine(model)
    cfg = GenerationConfig(max_new_tokens=8, sampling=SamplingConfig(temperature=1.0), seed=3)
    ids = tok.prompt_ids(PROMPTS[4])
    fresh = engine.generate(ids, cfg).token_ids
    assert engine.generate(ids, cfg, reuse_prefix=True).token_ids == fresh


@pytest.mark.parametrize("graft", [0, 6])                      # 6: with the n-gram path ("+ngram")
def test_draft_tree_greedy_equals_plain(grafted, target_fp32, plain_outputs, graft):
    from verispec.api import DEFAULT_DRAFT
    from verispec.proposers import draft_tree
    model, tok = target_fp32
    draft, _, _ = loader.load(DEFAULT_DRAFT, "fp32", need_tokenizer=False, target_embedding=model.embed.weight)
    proposer = draft_tree.DraftTreeProposer(draft, graft=graft)
    drafted, accepted = check_greedy_equal(model, tok, proposer, plain_outputs, k=4)
    assert accepted > 0 and bool(grafted) == bool(graft)


def test_draft_tree_with_auto_k_cuts_its_tree_and_keeps_greedy_output(target_fp32, plain_outputs):
    """Under k = "auto" draft-tree verifies its tree cut to the depth predicted fastest (`autotree.AutoCut`): where
    rows are dear, shallow cuts. Every cut keeps plain decoding's output."""
    from verispec.api import DEFAULT_DRAFT
    from verispec.autok import CostProfile
    from verispec.proposers import draft_tree
    model, tok = target_fp32
    draft, _, _ = loader.load(DEFAULT_DRAFT, "fp32", need_tokenizer=False, target_embedding=model.embed.weight)
    proposer, cuts = draft_tree.DraftTreeProposer(draft), []
    whole = proposer._tree
    proposer._tree = lambda context, tree: cuts.append(tree.depth) or whole(context, tree)
    dear = CostProfile({n: 1 + 0.12 * (n - 1) for n in range(1, 20)}, {"draft": 0.05}, {"draft": 0.7})
    engine = Engine(model, proposer, dear)
    cfg = GenerationConfig(max_new_tokens=MAX_NEW, k="auto", stop_token_ids=tok.stop_token_ids)
    accepted = 0
    for prompt, expected in zip(PROMPTS, plain_outputs):
        g = engine.generate(tok.prompt_ids(prompt), cfg)
        assert g.token_ids == expected, prompt
        accepted += g.stats.accepted_tokens
    assert accepted > 0 and cuts and max(cuts) < proposer.tree.depth and set(cuts) >= {1}


def test_draft_tree_copying_the_context_keeps_greedy_output(copied, monkeypatch, target_fp32, plain_outputs):
    """With "+ngram", a repeated suffix's continuation is verified alone, the draft model skipped and caught up
    later (`lookup_first`): still plain decoding's output. (2 repeated tokens are made enough here.)"""
    from verispec.api import DEFAULT_DRAFT
    from verispec.proposers import draft_tree, ngram
    monkeypatch.setattr(ngram, "SURE", 2)
    model, tok = target_fp32
    draft, _, _ = loader.load(DEFAULT_DRAFT, "fp32", need_tokenizer=False, target_embedding=model.embed.weight)
    drafted, accepted = check_greedy_equal(model, tok, draft_tree.DraftTreeProposer(draft, graft=6), plain_outputs,
                                           k=4)
    assert accepted > 0 and copied


def test_shipped_medusa_heads_greedy_equal_plain(target_fp32, plain_outputs):
    import torch

    from verispec.api import DEFAULT_MEDUSA
    from verispec.model.medusa import load_heads
    from verispec.proposers.medusa import MedusaProposer
    from verispec.tree import tree_from_acceptance
    model, tok = target_fp32
    heads, trees = load_heads(DEFAULT_MEDUSA, model, torch.float32)
    tree = tree_from_acceptance(trees["acceptance"], 16)[0]
    drafted, accepted = check_greedy_equal(model, tok, MedusaProposer(heads, tree), plain_outputs, k=8)
    assert accepted > 0


def test_medusa_with_auto_k_cuts_its_tree_and_keeps_greedy_output(target_fp32, plain_outputs):
    """Under k = "auto" Medusa's static tree is cut each cycle to the subtree predicted fastest from its heads'
    measured reach per node (`autotree.AutoCut`): where rows are dear, a few nodes, fewer than the tree holds at its
    first depth. Every cut keeps plain decoding's output."""
    import torch

    from verispec.api import DEFAULT_MEDUSA
    from verispec.autok import CostProfile
    from verispec.autotree import AutoCut
    from verispec.model.medusa import load_heads
    from verispec.proposers.medusa import MedusaProposer
    from verispec.tree import tree_from_acceptance
    model, tok = target_fp32
    heads, trees = load_heads(DEFAULT_MEDUSA, model, torch.float32)
    proposer = MedusaProposer(heads, tree_from_acceptance(trees["acceptance"], 16)[0], trees["acceptance"])
    cuts, whole = [], proposer._tree
    proposer._tree = lambda tree: cuts.append(tree.size) or whole(tree)
    dear = CostProfile({n: 1 + 0.02 * (n - 1) for n in range(1, 20)}, {"medusa": 0.02},
                       tree_curve={4: 1.1, 8: 1.5, 16: 2.2, 32: 4.0})
    engine = Engine(model, proposer, dear)
    cfg = GenerationConfig(max_new_tokens=MAX_NEW, k="auto", stop_token_ids=tok.stop_token_ids)
    assert isinstance(engine.sequence(tok.prompt_ids("Hi"), cfg).auto, AutoCut)
    accepted = 0
    for prompt, expected in zip(PROMPTS, plain_outputs):
        g = engine.generate(tok.prompt_ids(prompt), cfg)
        assert g.token_ids == expected, prompt
        accepted += g.stats.accepted_tokens
    assert accepted > 0 and cuts and max(cuts) < proposer.tree.cut(1).size


def test_a_fixed_k_never_measures_the_cost_profile(tiny_dir, monkeypatch):
    """Measuring a machine's costs takes minutes on a large model: only k = "auto" asks for the profile."""
    import verispec.api as api
    target = api.Target.load(str(tiny_dir), "fp32", "cpu")
    asked = []
    real = api.engine_profile
    monkeypatch.setattr(api, "engine_profile", lambda *a, **kw: asked.append(1) or real(*a, **kw))
    spec = api.Speculator(method="ngram", target=target)
    spec.generate("Count to ten", max_new_tokens=4, k=3)
    api.Speculator(method="plain", target=target).generate("Count to ten", max_new_tokens=4, k="auto")
    assert asked == []                                    # nor does plain decoding, whatever its k
    spec.generate("Count to ten", max_new_tokens=4, k="auto")
    spec.generate("Count to ten", max_new_tokens=4, k="auto")
    assert asked == [1]                                   # once, then kept


def test_prefix_reuse_with_a_proposer_reading_features_equals_a_fresh_start(target_fp32, monkeypatch):
    """The Python API's reuse_prefix with Medusa (features-reading, as EAGLE): a follow-up prompt that holds the
    first prompt and its answer starts from their kept keys, values and hidden states, and decodes what a fresh
    engine does, drafting the very same tokens."""
    import torch

    from verispec.api import DEFAULT_MEDUSA
    from verispec.engine import Sequence
    from verispec.model.medusa import load_heads
    from verispec.proposers.medusa import MedusaProposer
    from verispec.tree import tree_from_acceptance
    model, tok = target_fp32
    heads, trees = load_heads(DEFAULT_MEDUSA, model, torch.float32)
    tree = tree_from_acceptance(trees["acceptance"], 8)[0]
    cfg = GenerationConfig(max_new_tokens=12, k=4, sampling=SamplingConfig(0.0))
    engine = Engine(model, MedusaProposer(heads, tree))
    first = tok.prompt_ids(PROMPTS[0])
    answer = engine.generate(first, cfg, reuse_prefix=True).token_ids
    kept = engine.cached_tokens                                       # (drafts accepted past the budget too)
    assert engine.features.shape[0] == len(kept) and kept[:len(first) + len(answer) - 1] == first + answer[:-1]
    follow = first + answer + tok.encode("\nAnd once more, shorter:")
    heard, real = [], Sequence.heard
    monkeypatch.setattr(Sequence, "heard", lambda self, h, **kw: heard.append(h.shape[0]) or real(self, h, **kw))
    reused = engine.generate(follow, cfg, reuse_prefix=True)
    shared = next(i for i, (a, b) in enumerate(zip(kept + [-1], follow)) if a != b)
    assert heard[0] == shared >= len(first) + len(answer) - 1        # the kept prefix, heard before the rest
    fresh = Engine(model, MedusaProposer(heads, tree)).generate(follow, cfg)
    assert reused.token_ids == fresh.token_ids
    assert (reused.stats.drafted_tokens, reused.stats.accepted_tokens) == (fresh.stats.drafted_tokens,
                                                                         fresh.stats.accepted_tokens)



def test_streamed_text_adds_up_to_the_result_wherever_the_output_is_cut(tiny_dir, monkeypatch):
    """`on_text` pieces join to the result's text, also when the last token leaves a character incomplete."""
    from types import SimpleNamespace

    import verispec.api as api
    spec = api.Speculator(method="ngram", target=api.Target.load(str(tiny_dir), "fp32", "cpu"))
    ids = spec.target.tokenizer.encode("ok 日本🎉")
    for cut in range(1, len(ids) + 1):
        def generate(prompt, cfg, on_tokens, reuse_prefix):        # the engine's output: ids[:cut], in two calls
            on_tokens(ids[:cut - 1]), on_tokens(ids[cut - 1:cut])
            return SimpleNamespace(token_ids=ids[:cut], finish_reason="length",
                                   stats=SimpleNamespace(to_dict=lambda: {}))
        monkeypatch.setattr(spec.engine, "generate", generate)
        pieces = []
        r = spec.generate("Count to ten", max_new_tokens=cut, on_text=pieces.append)
        assert "".join(pieces) == r.text
    assert r.text.endswith("🎉") and any(spec.target.tokenizer.decode(ids[:c]).endswith("\ufffd")
                                         for c in range(len(ids)))


def test_generation_arguments_of_the_wrong_type_get_one_line_errors(tiny_dir):
    """The Python API checks its arguments' types as the CLI does: a float where an integer belongs, a string
    where a number belongs, or a seed torch cannot take is a VerispecError, not a TypeError from deep inside."""
    import verispec.api as api
    from verispec.errors import VerispecError
    spec = api.Speculator(method="ngram", target=api.Target.load(str(tiny_dir), "fp32", "cpu"))
    for kw, needle in (({"max_new_tokens": 3.0}, "max-new-tokens"), ({"max_new_tokens": None}, "max-new-tokens"),
                       ({"k": "4"}, "k must be an integer or auto, got '4'"), ({"seed": 2 ** 64}, "seed"), ({"seed": -1}, "seed"),
                       ({"temperature": "0.5"}, "temperature"), ({"temperature": 1.0, "top_k": 2.5}, "top-k"),
                       ({"temperature": 1.0, "top_p": None}, "top-p")):
        with pytest.raises(VerispecError, match=needle):
            spec.generate("Count to ten", **kw)
    assert spec.generate("Count to ten", max_new_tokens=3, seed=2 ** 64 - 1, temperature=1.0).token_ids
    for prompt in (None, 5, ["Count"]):
        with pytest.raises(VerispecError, match="the prompt must be text"):
            spec.generate(prompt)
    for messages in ("hi", [{"role": "bogus", "content": "hi"}], [{"role": "user", "content": 5}], ["hi"]):
        with pytest.raises(VerispecError, match="messages must be a list"):
            spec.chat(messages)
    assert spec.chat([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                     max_new_tokens=2).token_ids
