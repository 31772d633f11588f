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
