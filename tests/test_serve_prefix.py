"""The server's prefix cache (serve.prefix): which kept prompt a joining prompt starts from, what is kept within
the budget, and that a prompt prefilled from a kept prefix gets the very bits (keys, values, features shown to
the proposer, tokens) of its own whole prefill, alone and through the server, for every kind of proposer."""
import asyncio

import openai
import pytest
import torch

from serving import metric, offline_cached, offline_ids, serving
from verispec.api import Target
from verispec.engine import GenerationConfig, Sequence
from verispec.proposers.ngram import NgramProposer
from verispec.sampling import SamplingConfig
from verispec.serve.app import Server
from verispec.serve.batch import Batch
from verispec.serve.prefill import Prefill
from verispec.serve.prefix import PrefixCache

TEXT = ("The old lighthouse keeper climbed the stairs every evening, counting each step aloud. "
        "Numbers: 3 1 4 1 5 9 2 6 5 3 5. Dear diary, today the sea was calm and grey. ")


class FakeCache:
    """What `PrefixCache.keep` reads of a KVCache: `prefix(n)`; one float a position, its token id."""

    def __init__(self, ids):
        self.k = torch.tensor(ids, dtype=torch.float32)[None, None, :, None]      # [1, 1, n, 1]

    def prefix(self, n):
        return self.k[:, :, :n].clone(), self.k[:, :, :n].clone()


def kept(cache: PrefixCache, ids: list[int]):
    cache.keep(ids, FakeCache(ids), torch.tensor(ids, dtype=torch.float32)[:, None])


def test_a_prompt_starts_from_the_longest_kept_prefix_and_never_from_its_last_token():
    cache = PrefixCache(1, min_tokens=4)
    a, b = list(range(100, 120)), list(range(100, 110)) + list(range(200, 210))
    kept(cache, a)
    kept(cache, b)
    entry, n = cache.match(list(range(100, 115)) + [7, 8])
    assert entry.tokens.tolist() == a and n == 15
    entry, n = cache.match(b[:12] + [1])
    assert entry.tokens.tolist() == b and n == 12
    assert cache.match(a)[1] == len(a) - 1                        # the same prompt again: its last token is run
    k, v, f = cache.match(a + [5])[0].prefix(20)
    assert k.flatten().tolist() == f.flatten().tolist() == a      # a position's kept bits stay with its token
    assert cache.match([100, 101, 102, 9, 9, 9]) is None          # 3 shared tokens: fewer than min_tokens
    assert cache.match(list(range(100, 104))) is None             # a prompt no longer than min_tokens


def test_kept_prompts_stay_within_the_budget_the_least_recently_used_going_first():
    one = len(list(range(40))) * (8 + 4 * 3)                      # bytes of a 40-token entry: ids, k, v, features
    cache = PrefixCache(2.5 * one / 2 ** 20, min_tokens=4)
    prompts = [[i] * 40 for i in (1, 2, 3)]
    kept(cache, prompts[0])
    kept(cache, prompts[1])
    assert cache.match(prompts[0] + [9]) is not None              # the first is now the most recently used
    kept(cache, prompts[2])                                       # no room for three: the second goes
    assert [e.tokens[0].item() for e in cache.entries] == [1, 3] and cache.nbytes == 2 * one <= cache.budget
    kept(cache, prompts[2] + [4] * 10)                            # extends the third: it replaces it
    assert [len(e.tokens) for e in cache.entries] == [40, 50] and cache.nbytes <= cache.budget
    kept(cache, prompts[2] + [4] * 5)                             # a prefix of a kept one: nothing new
    assert [len(e.tokens) for e in cache.entries] == [40, 50]
    kept(PrefixCache(one / 2 ** 20 / 2, min_tokens=4), prompts[0])   # larger than the whole budget: not kept
    kept(cache, prompts[2] + [4] * 90)             # a prompt and its answer, larger than the budget: the entry it
    assert [len(e.tokens) for e in cache.entries] == [40, 50]    # extends stays, and so does every other


def test_a_lookup_compares_only_the_entries_that_begin_as_the_prompt_does(monkeypatch):
    """A client can fill the cache with thousands of short prompts; a lookup (and a keep) on the decoding thread
    then compared every one. Only an entry whose first min_tokens tokens are the prompt's can share min_tokens
    with it, so only those are compared, and the answer is the same."""
    from verispec.serve import prefix as prefix_mod
    cache = PrefixCache(64, min_tokens=4)
    for i in range(300):
        kept(cache, [1000 + i, 1, 2, 3, 4, 5])                     # 300 entries, each beginning its own way
    ours = [7, 7, 7, 7, 8, 9, 10]
    kept(cache, ours)
    compared = []
    real = prefix_mod.shared
    monkeypatch.setattr(prefix_mod, "shared", lambda a, b: compared.append(1) or real(a, b))
    entry, n = cache.match(ours[:6] + [0, 0])
    assert entry.tokens.tolist() == ours and n == 6 and len(compared) == 1
    kept(cache, ours + [11])                                       # extends ours: ours goes, nothing else
    assert len(compared) == 2 and len(cache.entries) == 301 and cache.match(ours + [11, 12])[1] == len(ours) + 1
    assert cache.match([1000, 1, 2, 3, 4, 9])[1] == 5 and cache.match([5, 1, 2, 3, 4, 9]) is None


def test_an_engine_run_that_fails_leaves_nothing_to_reuse(tiny_dir):
    """A run that raises (here its token callback) must not leave the last run's tokens paired with this run's
    cache: the next reuse_prefix run starts afresh and decodes what a fresh engine does."""
    from verispec.engine import Engine
    tiny = Target.load(str(tiny_dir), "fp32", "cpu")
    cfg = GenerationConfig(max_new_tokens=6, k=3, sampling=SamplingConfig(0.0))
    a, b = tiny.tokenizer.encode(TEXT), tiny.tokenizer.encode("Something else entirely, " * 4)
    engine = Engine(tiny.model)
    engine.generate(a, cfg, reuse_prefix=True)

    heard = []

    def boom(ids):                                 # the first token passes; the first cycle's raises
        heard.append(ids)
        if len(heard) > 1:
            raise KeyError("client went away")
    with pytest.raises(KeyError):
        engine.generate(b, cfg, on_tokens=boom, reuse_prefix=True)
    assert engine.cached_tokens == []
    assert engine.generate(a, cfg, reuse_prefix=True).token_ids == Engine(tiny.model).generate(a, cfg).token_ids


class Watching(NgramProposer):
    """A proposer reading the target's features (as EAGLE and Medusa do): records what it is shown."""
    reads_features = True

    def __init__(self):
        super().__init__()
        self.seen = []

    def prepare(self, capacity):
        self.seen = []

    def observe(self, hidden):
        self.seen.append(hidden.clone())


@pytest.mark.parametrize("chunk", [0, 7])
def test_a_prompt_prefilled_from_a_kept_prefix_gets_the_bits_of_its_own_whole_prefill(tiny_dir, chunk):
    tiny = Target.load(str(tiny_dir), "fp32", "cpu")
    tok = tiny.tokenizer
    first, second = tok.encode(TEXT * 2), tok.encode(TEXT * 2 + "Once upon a time, in a quiet harbour town")
    assert second[:len(first) - 2] == first[:-2] and len(first) > 60
    cfg = GenerationConfig(max_new_tokens=16, k=3, sampling=SamplingConfig(0.0))
    prefix = PrefixCache(64, min_tokens=16)

    def prefill(ids, proposer):
        seq = Sequence(tiny.model, proposer, ids, cfg, tiny.profile())
        p = Prefill(seq, keep_features=True)
        hit = prefix.match(ids)
        if hit is not None:
            p.reuse(*hit[0].prefix(hit[1]))
        while p.remaining:
            p.advance(chunk)
        prefix.keep(ids, seq.cache, p.prompt_features())
        return seq, hit

    _, hit = prefill(first, Watching())
    assert hit is None and len(prefix.entries) == 1
    reused, hit = prefill(second, Watching())
    assert hit is not None and hit[1] >= len(first) - 3
    whole = Sequence(tiny.model, Watching(), second, cfg, tiny.profile())
    whole.prefill()
    n = len(second)
    assert reused.cache.length == whole.cache.length == n
    assert torch.equal(reused.cache.k[:, :, :, :n], whole.cache.k[:, :, :, :n])   # bit for bit, on the kernels
    assert torch.equal(reused.cache.v[:, :, :, :n], whole.cache.v[:, :, :, :n])
    assert torch.equal(torch.cat(reused.proposer.seen), torch.cat(whole.proposer.seen))   # every position, once
    for seq in (reused, whole):
        batch = Batch(tiny.model)
        batch.join(seq)
        while batch.running:
            batch.step()
    assert reused.out == whole.out and len(whole.out) == 16
    assert [len(e.tokens) for e in prefix.entries] == [len(first), n]    # the first does not prefix the second


def test_a_chats_next_turn_reuses_its_first_turn_and_equals_offline_for_every_method(target_bf16):
    """Greedy chats of two turns through the server, each method's second turn prefilled from the first turn's
    kept prompt and answer: both turns equal offline decoding of the same messages (plain greedy), so an answer's
    keys, values and features, computed while decoding, are the bits a prefill gives them; the metrics count the
    reused tokens."""
    tok = target_bf16.tokenizer
    server = Server(target_bf16, "eagle", "auto", max_batch=4, tree="dynamic+ngram", prefill_chunk=32,
                    allowed_methods=["eagle", "draft", "ngram", "plain"])
    turn1 = [{"role": "user", "content": "Summarise this in one sentence: " + TEXT * 3}]

    async def chat(client, messages, method):
        r = await client.chat.completions.create(model=server.name, messages=messages, max_tokens=12,
                                                 temperature=0, extra_body={"speculative": {"method": method}})
        return r.choices[0].message.content

    with serving(server) as base:
        async def main():
            client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
            out, reuse = {}, []
            for method in ("eagle", "draft", "ngram", "plain"):
                first = await chat(client, turn1, method)
                turn2 = turn1 + [{"role": "assistant", "content": first},
                                 {"role": "user", "content": f"Now in {method} words?"}]
                before = metric(base, "verispec_prefix_cache_tokens_total")
                out[method] = (first, turn2, await chat(client, turn2, method))
                reuse.append(metric(base, "verispec_prefix_cache_tokens_total") - before)
            await client.close()
            return out, reuse

        out, reuse = asyncio.run(main())
        hits = metric(base, "verispec_prefix_cache_hits_total")
        reused = metric(base, "verispec_prefix_cache_tokens_total")
        kept_bytes = metric(base, "verispec_prefix_cache_bytes")
    def offline(messages):
        return offline_ids(target_bf16, tok.chat_ids(messages), 12)

    first_expected = offline(turn1)
    for method, (first, turn2, second) in out.items():
        assert first == first_expected, method
        assert second == offline(turn2), method
    prompt1 = tok.chat_ids(turn1)
    assert hits == 7 and reused >= 7 * (len(prompt1) - 8)        # every request after the first
    cached = offline_cached(target_bf16, prompt1, 12)[1]         # the first turn, answer and all, as cached
    turn2 = tok.chat_ids(out["eagle"][1])
    shared = next(i for i, (a, b) in enumerate(zip(cached + [-1], turn2)) if a != b)
    assert reuse[0] == shared > len(prompt1) + 8                 # the first turn's answer too, as it was cached
    assert 0 < kept_bytes <= server.limits.prefix_cache_mb * 2 ** 20


def test_the_python_apis_chat_starts_a_turn_from_the_last_and_equals_a_fresh_start(target_bf16, monkeypatch):
    """`Speculator.chat`: the second turn starts from the first turn's prompt and answer (EAGLE shown their kept
    features) and decodes what a fresh Speculator does."""
    from verispec.api import Speculator
    spec = Speculator(method="eagle", target=target_bf16)
    turn1 = [{"role": "user", "content": "Summarise this in one sentence: " + TEXT * 2}]
    first = spec.chat(turn1, max_new_tokens=12)
    turn2 = turn1 + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "Shorter?"}]
    heard, real = [], Sequence.heard
    monkeypatch.setattr(Sequence, "heard", lambda self, h, **kw: heard.append(h.shape[0]) or real(self, h, **kw))
    second = spec.chat(turn2, max_new_tokens=12)
    assert heard[0] > len(target_bf16.tokenizer.chat_ids(turn1))         # the first turn's answer too
    monkeypatch.undo()
    fresh = Speculator(method="eagle", target=target_bf16).chat(turn2, max_new_tokens=12)
    assert second.token_ids == fresh.token_ids and second.stats["drafted_tokens"] == fresh.stats["drafted_tokens"]
