"""Batched decoding: packed passes equal separate ones bit for bit, and no sequence's output depends on its batch."""
import pytest
import torch

from verispec.autok import CostProfile
from verispec.engine import Engine, GenerationConfig
from verispec.proposers.base import fork
from verispec.sampling import SamplingConfig
from verispec.serve.batch import Batch
from verispec.tree import topk_per_depth

PROMPTS = [
    "Write a Python function that returns the squares of a list of numbers.",
    "Explain why the sky is blue in two sentences.",
    "Rewrite this sentence in the passive voice: The cat chased the mouse around the kitchen.",
    "A train travels 60 miles per hour for 3 hours. How far does it go?",
    "List three uses of a paperclip.",
    "Translate to French: Good morning, how are you today?",
]


def test_packed_pass_equals_each_sequence_alone_bit_for_bit(target_bf16):
    """One token, a 5-token chain, a 7-node tree and a 20-token chain (33 rows in all, so the matrix products run
    in blocks) over caches of different lengths: every row equals the same sequence's pass alone."""
    model, tok = target_bf16.model, target_bf16.tokenizer
    tree = topk_per_depth([3, 2])
    shapes = [(1, None), (5, None), (1 + tree.size, tree), (20, None)]
    contexts = [tok.prompt_ids(p) for p in PROMPTS[:4]]

    def segments():
        out = []
        for ids, (n, t) in zip(contexts, shapes):
            cache = model.new_cache(len(ids) + 32)
            model(torch.tensor([ids]), torch.arange(len(ids))[None], cache)
            new = torch.randint(0, model.cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(n))
            if t is None:
                out.append((new, torch.arange(len(ids), len(ids) + n)[None], cache, None))
            else:
                mask = torch.cat([torch.ones(n, len(ids), dtype=torch.bool), t.ancestry], 1)[None]
                out.append((new, (len(ids) + torch.tensor(t.depths))[None], cache, mask))
        return out

    together = model.forward_packed(segments())
    alone = [model(*seg) for seg in segments()]
    assert [h.shape[1] for h in together] == [1, 5, 1 + tree.size, 20]
    for a, b in zip(alone, together):
        assert torch.equal(a, b)


def run_alone(target, method, prompt_ids, cfg):
    from verispec.api import make_engine
    return make_engine(method, target).generate(prompt_ids, cfg).token_ids


def sequences(target, methods, cfgs):
    """Each method's sequences with the profile its engine alone gets (`make_engine`: for a draft model, the
    draft's c measured on this machine), as the server gives them."""
    from verispec.api import make_engine
    engines = {m: make_engine(m, target) for m in set(methods)}
    return [Engine(target.model, fork(engines[m].proposer), engines[m].profile).sequence(
        target.tokenizer.prompt_ids(p), cfg) for p, m, cfg in zip(PROMPTS, methods, cfgs)]


def test_greedy_output_is_the_same_alone_and_in_a_mixed_batch(target_bf16):
    """Six requests, four methods, automatic k, joining at different steps: each equals plain decoding alone."""
    tok = target_bf16.tokenizer
    cfg = GenerationConfig(max_new_tokens=40, k="auto", stop_token_ids=tok.stop_token_ids)
    methods = ["ngram", "draft", "plain", "medusa", "draft", "ngram"]
    expected = [run_alone(target_bf16, "plain", tok.prompt_ids(p), cfg) for p in PROMPTS]
    seqs = sequences(target_bf16, methods, [cfg] * 6)
    batch = Batch(target_bf16.model, target_bf16.profile())
    for seq in seqs[:4]:
        batch.add(seq)
    batch.step()
    batch.step()
    for seq in seqs[4:]:          # late joiners (continuous batching)
        batch.add(seq)
    while batch.running:
        batch.step()
    assert [s.result().token_ids for s in seqs] == expected
    assert sum(s.stats.accepted_tokens for s in seqs) > 0


def steep_profile(target) -> CostProfile:
    """The target's profile with a flat single-sequence curve (whatever this machine's is: verification nearly
    free alone), but with batches of 2+ so compute-bound that speculation never pays in them."""
    p = target.profile()
    p.curve = {n: 1 + 0.04 * (n - 1) for n in range(1, 17)}
    p.batch_curve = {2: {n: float(n) for n in range(1, 17)}}
    p.batch_scale = {2: 1.0}
    return p


def test_seeded_sampling_is_the_same_alone_and_in_a_batch(target_bf16):
    """Temperature 1, fixed seeds, the draft with automatic k: pinned sequences keep their k schedule, so their
    random streams and outputs are exactly those of running alone, even where the batch switches speculation
    off for the others."""
    tok = target_bf16.tokenizer
    cfgs = [GenerationConfig(max_new_tokens=32, k="auto", seed=s, sampling=SamplingConfig(1.0),
                             stop_token_ids=tok.stop_token_ids) for s in range(4)]
    alone = [run_alone(target_bf16, "draft", tok.prompt_ids(p), c) for p, c in zip(PROMPTS, cfgs)]
    seqs = sequences(target_bf16, ["draft"] * 4, cfgs)
    batch = Batch(target_bf16.model, steep_profile(target_bf16))
    for seq in seqs:
        batch.add(seq, pinned=True)
    while batch.running:
        batch.step()
    assert [s.result().token_ids for s in seqs] == alone
    assert len({tuple(a) for a in alone}) == 4                  # the seeds matter


def test_batch_aware_k_switches_speculation_off_where_the_batch_cost_curve_says_so(target_bf16):
    tok = target_bf16.tokenizer
    cfg = GenerationConfig(max_new_tokens=48, k="auto", stop_token_ids=tok.stop_token_ids)
    profile = steep_profile(target_bf16)
    c, curve = profile.batch_costs("ngram", 2)
    assert curve[5] == 5.0 and c == pytest.approx(2 * profile.draft_cost["ngram"])
    assert profile.batch_costs("ngram", 1) == (profile.draft_cost["ngram"], profile.curve)
    seqs = sequences(target_bf16, ["ngram"] * 2, [cfg] * 2)
    batch = Batch(target_bf16.model, profile)
    batch.run(seqs)
    alone = [run_alone(target_bf16, "ngram", tok.prompt_ids(p), cfg) for p in PROMPTS[:2]]
    assert [s.result().token_ids for s in seqs] == alone        # greedy: the same output, whatever k
    drafted = sum(s.stats.drafted_tokens for s in seqs)
    passes = sum(s.stats.target_passes for s in seqs)
    assert drafted < 0.2 * passes                               # only the occasional probe drafts
    solo = sequences(target_bf16, ["ngram"] * 2, [cfg] * 2)
    for seq in solo:
        Batch(target_bf16.model, profile).run([seq])           # a batch of one: the single-sequence curve
    assert drafted < 0.5 * sum(s.stats.drafted_tokens for s in solo)


def test_drafting_together_equals_drafting_alone(target_bf16):
    """Three sequences sharing the draft model, different contexts and k, temperature 1: one packed draft pass
    per step gives each exactly the tokens and q it drafts alone with the same generator state."""
    from verispec.api import make_proposer
    from verispec.proposers.draft_model import propose_together
    tok, base = target_bf16.tokenizer, make_proposer("draft", target_bf16)
    contexts = [tok.prompt_ids(p) for p in PROMPTS[:3]]
    ks, sampling = [4, 2, 5], SamplingConfig(1.0)

    def draft(together: bool):
        props = [fork(base) for _ in contexts]
        for p in props:
            p.prepare(512)
        jobs = [(p, c, k, sampling, torch.Generator().manual_seed(i))
                for i, (p, c, k) in enumerate(zip(props, contexts, ks))]
        return propose_together(jobs) if together else [p.propose(c, k, s, g) for p, c, k, s, g in jobs]

    alone, together = draft(False), draft(True)
    assert [len(p.tokens) for p in together] == ks
    for a, b in zip(alone, together):
        assert a.tokens == b.tokens and torch.equal(a.q, b.q)
