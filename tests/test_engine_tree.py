"""Tree verification inside the engine: greedy output equals plain greedy decoding whatever the tree holds."""
from verispec.engine import Engine, GenerationConfig
from verispec.proposers.base import Proposal, Proposer
from verispec.proposers.ngram import lookup
from verispec.sampling import SamplingConfig
from verispec.tree import topk_per_depth


class ToyTreeProposer(Proposer):
    """First choices follow prompt lookup; other choices are arbitrary tokens. Deterministic (q = None)."""
    name = "toy-tree"
    makes_trees = True

    def __init__(self, widths):
        self.widths = widths
        self.max_nodes = topk_per_depth(widths).size

    def propose(self, context, k, sampling, generator):
        depth = min(k, len(self.widths))
        if depth == 0:
            return Proposal([])
        tree = topk_per_depth(self.widths[:depth])
        guess = lookup(context, depth) + [7] * depth
        tokens = []
        for choice in tree.choices:
            d, r = len(choice) - 1, choice[-1]
            tokens.append(guess[d] if all(c == 0 for c in choice) else (guess[d] + 17 * r + d) % 49152)
        return Proposal(tokens, None, tree)


def test_tree_greedy_equals_plain(target_fp32):
    from test_engine import PROMPTS
    model, tok = target_fp32
    cfg = GenerationConfig(max_new_tokens=24, k=4, stop_token_ids=tok.stop_token_ids)
    plain, tree = Engine(model), Engine(model, ToyTreeProposer([2, 2, 1]))
    accepted = 0
    for prompt in PROMPTS[:4]:
        ids = tok.prompt_ids(prompt)
        g = tree.generate(ids, cfg)
        assert g.token_ids == plain.generate(ids, cfg).token_ids
        accepted += g.stats.accepted_tokens
    assert accepted > 0


def test_tree_sampling_is_seeded_and_runs(target_fp32):
    model, tok = target_fp32
    engine = Engine(model, ToyTreeProposer([3, 1]))
    cfg = GenerationConfig(max_new_tokens=12, k=2, seed=4, sampling=SamplingConfig(temperature=1.0))
    ids = tok.prompt_ids("Repeat: one two three one two three")
    a, b = engine.generate(ids, cfg), engine.generate(ids, cfg)
    assert a.token_ids == b.token_ids and len(a.token_ids) == 12


def test_tree_verification_computes_p_only_where_it_reads(target_fp32, monkeypatch):
    """`NodeProbs` computes a node's p when verification first reads it, with its first-choice descendants: each row
    has the bits of the product over every row, the untried branches never pay for the output head, and sampling
    at T = 1 draws the very tokens it draws with every row's p computed up front."""
    import torch

    from verispec.engine import NodeProbs
    from verispec.sampling import probs
    model, tok = target_fp32
    tree = topk_per_depth([3, 2, 2])
    ids = tok.prompt_ids("Repeat: one two three one two three")
    cache = model.new_cache(len(ids) + 1 + tree.size)
    model(torch.tensor([ids]), torch.arange(len(ids))[None], cache)
    n = len(ids)
    nodes = torch.randint(0, 49152, (1, 1 + tree.size), generator=torch.Generator().manual_seed(0))
    mask = torch.cat([torch.ones(1 + tree.size, n, dtype=torch.bool), tree.ancestry], 1)[None]
    hidden = model(nodes, (n + torch.tensor(tree.depths))[None], cache, mask)
    sampling = SamplingConfig(temperature=1.0, top_p=0.9)
    full = probs(model.logits(hidden), sampling)[0]                                  # [1+n, V]
    lazy = NodeProbs(model, hidden[0], tree, sampling)
    assert torch.equal(lazy[0], full[0]) and sorted(lazy.rows) == [0, 1, 4, 10]     # the root's first-choice line
    for node in range(1 + tree.size):
        assert torch.equal(lazy[node], full[node])

    from verispec import engine as engine_module
    monkeypatch.setattr(engine_module, "LAZY_ROWS", 0)                              # every tree: NodeProbs
    engine = Engine(model, ToyTreeProposer([3, 2, 1]))
    cfg = GenerationConfig(max_new_tokens=20, k=3, seed=5, sampling=sampling)
    runs = []
    for upfront in (False, True):
        seq = engine.sequence(tok.prompt_ids("Count: one two three one two three one two"), cfg)
        seq.prefill()
        while not seq.done:
            step = seq.plan(seq.draft_length())
            hidden = model(*step.inputs(seq.cache))
            seq.finish(step, hidden, model.logits(hidden) if upfront else None)
        runs.append(seq.result().token_ids)
    assert runs[0] == runs[1] and len(runs[0]) == 20


def test_a_sequence_can_be_driven_outside_inference_mode(target_bf16):
    """`Engine.sequence`'s steps (prefill, plan, finish) called from plain code, after `generate` made the EAGLE
    head's cache and its store of laid-out chunks in inference mode: the same tokens, no refusal to update an
    inference tensor (the head's cache is cleared, and its store's flags with it, at every prefill)."""
    import torch

    from verispec.api import make_engine
    from verispec.model.rows import CHUNK
    tok = target_bf16.tokenizer
    engine = make_engine("eagle", target_bf16)
    cfg = GenerationConfig(max_new_tokens=12, k=3, stop_token_ids=tok.stop_token_ids)
    ids = tok.prompt_ids("Count: one two three one two three one two")
    first = engine.generate(ids, cfg).token_ids
    with torch.inference_mode():
        engine.proposer.cache.panels(CHUNK, "pairs")        # a store, made in inference mode as the kernels make it
    seq = engine.sequence(ids, cfg)
    seq.prefill()
    while not seq.done:
        step = seq.plan(seq.draft_length())
        with torch.inference_mode():
            hidden = target_bf16.model(*step.inputs(seq.cache))
        seq.finish(step, hidden)
    assert seq.result().token_ids == first
