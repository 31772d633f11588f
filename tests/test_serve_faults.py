"""Faults and departures on a tiny random model (fp32): a failing sequence fails alone, a dead decoding loop
shows in /health and refuses requests, clients that leave free their jobs, and chunked prefill keeps both the
output and the running streams going."""
import json
import threading
import time

import httpx
import pytest
import torch

from serving import metric, offline_ids, post, serving
from verispec.api import Target
from verispec.serve.app import Server
from verispec.serve.prefill import Prefill

PROMPTS = ["The old lighthouse keeper", "Numbers: 3 1 4 1 5 9", "Dear diary, today", "Once upon a time"]


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return Target.load(str(tiny_dir), "fp32", "cpu")


def body(target, prompt, **kw) -> dict:
    return {"model": target.folder.rstrip("/").split("/")[-1], "prompt": prompt, "temperature": 0, **kw}


def planted(marker_ids: list[int], after: int = 3):
    """A fault hook: the sequence whose prompt is `marker_ids` raises once it has `after` tokens."""
    def fault(seq):
        if seq.prompt == marker_ids and len(seq.out) >= after:
            raise RuntimeError("planted fault")
    return fault


def stream_events(base, payload) -> list:
    out = []
    with httpx.stream("POST", base + "/v1/completions", json={**payload, "stream": True}, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                out.append(json.loads(line[6:]))
    return out


def test_a_failing_sequence_fails_alone_and_the_others_keep_their_output(tiny):
    tok = tiny.tokenizer
    bad = "This one will fail"
    server = Server(tiny, "ngram", max_batch=8, allowed_methods=["ngram", "plain"])
    server.scheduler.batch.fault = planted(tok.encode(bad))
    results = {}

    def run(i, prompt, stream):
        payload = body(tiny, prompt, max_tokens=30, speculative={"method": ["ngram", "plain"][i % 2]})
        results[i] = stream_events(base, payload) if stream else post(base, "/v1/completions", payload)

    with serving(server) as base:
        jobs = [(0, PROMPTS[0], False), (1, bad, False), (2, PROMPTS[1], True), (3, bad, True), (4, PROMPTS[2], False)]
        threads = [threading.Thread(target=run, args=job) for job in jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results[1].status_code == 500 and "planted fault" in results[1].json()["error"]["message"]
        assert "planted fault" in results[3][-1]["error"]["message"]        # the stream ends with an error event
        for i in (0, 4):
            assert results[i].json()["choices"][0]["text"] == offline_ids(tiny, tok.encode(jobs[i][1]), 30)
        assert "".join(e["choices"][0]["text"] for e in results[2]) == offline_ids(tiny, tok.encode(PROMPTS[1]), 30)
        assert metric(base, "verispec_requests_total", '{method="ngram",outcome="error"}') + \
            metric(base, "verispec_requests_total", '{method="plain",outcome="error"}') == 2
        assert httpx.get(base + "/health").json()["status"] == "ok"
        assert post(base, "/v1/completions", body(tiny, PROMPTS[3], max_tokens=4)).status_code == 200


def test_a_dead_decoding_loop_fails_health_and_new_requests(tiny, monkeypatch):
    server = Server(tiny, "plain")
    with serving(server) as base:
        assert httpx.get(base + "/health").status_code == 200
        monkeypatch.setattr(server.scheduler, "_admit", lambda: 1 / 0)    # a bug of the loop itself
        r = post(base, "/v1/completions", body(tiny, "Hello", max_tokens=4))
        assert r.status_code == 500 and "decoding loop died" in r.json()["error"]["message"]
        health = httpx.get(base + "/health")
        assert health.status_code == 503 and "ZeroDivisionError" in health.json()["error"]
        r = post(base, "/v1/completions", body(tiny, "Hello", max_tokens=4))
        assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"


def test_jobs_still_in_the_inbox_hear_that_the_loop_died(tiny, monkeypatch):
    """A job submitted but not yet taken from the inbox when the loop dies gets the error too (it waited forever),
    and no job can slip into the inbox once the loop is dead."""
    import asyncio

    from verispec.serve.scheduler import Job, Refused
    scheduler = Server(tiny, "plain").scheduler                          # not started: we run its loop here
    loop = asyncio.new_event_loop()
    job = Job("plain", loop)
    scheduler.submit(job)
    monkeypatch.setattr(scheduler, "_take_new", lambda block: 1 / 0)    # dies before taking it
    scheduler.run()
    loop.run_until_complete(asyncio.sleep(0))                            # the events sent from the loop's side
    event = job.events.get_nowait()
    assert event[0] == "error" and "ZeroDivisionError" in event[1] and scheduler.pending == 0
    with pytest.raises(Refused):
        scheduler.submit(Job("plain", loop))
    loop.close()


def test_a_failed_step_hands_back_the_sequences_cancelled_before_it(tiny, monkeypatch):
    """A step that fails outside any one sequence's work fails the whole batch: the sequences cancelled just before
    it (a client gone, a stop string) must come back from `abandon` too, or their jobs and KV budget leak."""
    from verispec.autok import CostProfile
    from verispec.engine import GenerationConfig, Sequence
    from verispec.serve.batch import Batch
    batch = Batch(tiny.model)
    seqs = [Sequence(tiny.model, None, tiny.tokenizer.encode(p), GenerationConfig(max_new_tokens=20), CostProfile())
            for p in PROMPTS[:2]]
    for seq in seqs:
        batch.add(seq)
    batch.step()
    seqs[0].cancel()
    monkeypatch.setattr(batch, "_fit_k", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        batch.step()
    assert sorted(map(id, batch.abandon())) == sorted(map(id, seqs))


def test_a_long_prompt_keeps_prefilling_while_short_ones_keep_coming(tiny):
    """Chunked prefill serves the shortest prompt first, so a steady stream of short prompts took every chunk and
    an admitted long prompt never advanced; one passed over more than 4 loops in a row now goes first."""
    import asyncio

    from verispec.autok import CostProfile
    from verispec.engine import GenerationConfig, Sequence
    from verispec.serve.scheduler import Job
    scheduler = Server(tiny, "plain", prefill_chunk=8).scheduler
    loop = asyncio.new_event_loop()

    def job(text):
        j = Job("plain", loop)
        j.sequence = Sequence(tiny.model, None, tiny.tokenizer.encode(text), GenerationConfig(max_new_tokens=2),
                              CostProfile())
        j.prefill = Prefill(j.sequence)
        return j
    long = job(" ".join(PROMPTS * 8))
    scheduler.prefilling.append(long)
    before = long.prefill.remaining
    short = len(tiny.tokenizer.encode("Hi there"))
    for _ in range(20):
        for _ in range(8 // short + 1):                   # more short prompt tokens than a chunk, every loop
            scheduler.prefilling.append(job("Hi there"))
        scheduler._prefill()
    assert before - long.prefill.remaining >= 2 * 8, (before, long.prefill.remaining)   # (more than the chunks
    loop.close()                                       # can take comes each loop: it shares them with the backlog)


def slow(server, seconds: float):
    """Every decoding step takes at least `seconds` (so a test can act while requests run)."""
    server.scheduler.batch.fault = lambda seq: time.sleep(seconds / max(1, len(server.scheduler.batch.running)))


def test_clients_that_leave_before_their_stream_starts_or_mid_stream_free_their_jobs(tiny):
    server = Server(tiny, "plain", max_batch=1)
    slow(server, 0.02)
    with serving(server) as base:
        running = httpx.Client(timeout=60)
        first = running.stream("POST", base + "/v1/completions", json=body(tiny, "Hello", max_tokens=400,
                                                                           stream=True))
        lines = first.__enter__().iter_lines()
        next(line for line in lines if line.startswith("data: "))         # the first one decodes
        waiting = httpx.Client(timeout=60)
        second = waiting.stream("POST", base + "/v1/completions", json=body(tiny, "Hi", max_tokens=400, stream=True))
        second.__enter__()                                                   # headers only: it waits for a slot
        deadline = time.time() + 10
        while not server.scheduler.waiting:
            assert time.time() < deadline
            time.sleep(0.02)
        waiting.close()                                                      # leaves before its first token
        deadline = time.time() + 3                                           # the first runs for 8 s more
        while metric(base, "verispec_requests_total", '{method="none",outcome="cancelled before start"}') < 1:
            assert time.time() < deadline, "the abandoned waiting job was never dropped"
            time.sleep(0.05)
        assert server.scheduler.pending == 0 and len(server.scheduler.batch) == 1
        running.close()                                                      # leaves mid-stream
        while metric(base, "verispec_requests_total", '{method="plain",outcome="disconnected"}') < 1:
            assert time.time() < deadline, "the abandoned stream kept decoding"
            time.sleep(0.05)
        assert len(server.scheduler.batch) == 0 and server.kv.used == 0


def test_chunked_prefill_gives_the_same_tokens_as_one_pass(tiny):
    tok = tiny.tokenizer
    from verispec.engine import GenerationConfig, Sequence
    from verispec.sampling import SamplingConfig
    from verispec.serve.batch import Batch
    ids = tok.encode(" ".join(PROMPTS) * 6)                                  # about 150 tokens
    cfg = GenerationConfig(max_new_tokens=12, k=3, sampling=SamplingConfig(0.0))
    whole = Sequence(tiny.model, None, ids, cfg, tiny.profile())
    Batch(tiny.model).run([whole])
    for chunk in (1, 7, 64):
        seq = Sequence(tiny.model, None, ids, cfg, tiny.profile())
        p, calls = Prefill(seq), 0
        while p.remaining:
            assert p.advance(chunk) <= chunk
            calls += 1
        assert calls >= len(ids) // chunk
        batch = Batch(tiny.model)
        batch.join(seq)
        while batch.running:
            batch.step()
        assert seq.out == whole.out, chunk
        n = len(ids)                    # the prompt's keys and values: bit for bit those of one pass (kernels)
        assert torch.equal(seq.cache.k[:, :, :, :n], whole.cache.k[:, :, :, :n]), chunk
        assert torch.equal(seq.cache.v[:, :, :, :n], whole.cache.v[:, :, :, :n]), chunk


def test_a_long_prompt_joins_in_chunks_between_decoding_steps(tiny):
    """With --prefill-chunk 16, a 300-token prompt joining a running stream is prefilled 16 tokens at a time, a
    decoding step of the running stream between two chunks; both outputs equal offline decoding."""
    tok = tiny.tokenizer
    server = Server(tiny, "plain", max_batch=4, prefill_chunk=16)
    log = []
    real = Prefill.advance
    server.scheduler.batch.fault = lambda seq: log.append("step") or time.sleep(0.005)   # ~0.6 s of steps

    def advance(self, budget):
        n = real(self, budget)
        log.append(n)
        return n

    long_prompt = " ".join(PROMPTS) * 12
    out = {}
    with serving(server) as base:
        Prefill.advance = advance
        try:
            running = threading.Thread(target=lambda: out.update(
                a=post(base, "/v1/completions", body(tiny, PROMPTS[0], max_tokens=120)).json()))
            running.start()
            while "step" not in log:
                time.sleep(0.01)
            out["b"] = post(base, "/v1/completions", body(tiny, long_prompt, max_tokens=10)).json()
            running.join()
        finally:
            Prefill.advance = real
    chunks = [i for i, x in enumerate(log) if x != "step" and x > 1]
    assert len(chunks) >= 300 // 16 and all(log[i] <= 16 for i in chunks)
    assert all("step" in log[a:b] for a, b in zip(chunks, chunks[1:])), "two chunks ran with no step between"
    assert out["a"]["choices"][0]["text"] == offline_ids(tiny, tok.encode(PROMPTS[0]), 120)
    assert out["b"]["choices"][0]["text"] == offline_ids(tiny, tok.encode(long_prompt), 10)


def test_the_fault_injection_load_test_passes_and_catches_a_broken_server(tiny, monkeypatch):
    from verispec.serve import batch as batch_module
    from verispec.serve.faults import passed, run_faults
    prompts = PROMPTS[:3]
    report = run_faults(Server(tiny, "ngram", max_batch=4, prefill_chunk=32), prompts, clients=4, duration=3,
                        max_tokens=12, long_tokens=200, fault_every=2)
    assert passed(report, slack_mb=0.1), report           # (the tiny model's requests hold little: see below)
    assert report["well_formed"] > 0 and sum(f["sent"] for f in report["faults"].values()) >= len(report["faults"])
    assert report["with_long_prompts"]["streams"] > 0 and report["without_long_prompts"]["streams"] > 0

    def fail_everyone(self, seq, error):                       # isolation switched off: one fault fails the batch
        for other in list(self.running):
            other.cancel()
            self.running.remove(other)
            self.failed.append((other, error))

    monkeypatch.setattr(batch_module.Batch, "_fail", fail_everyone)
    broken = run_faults(Server(tiny, "ngram", max_batch=4), prompts, clients=4, duration=3, max_tokens=12,
                        long_tokens=0, fault_every=2)
    assert broken["lost"] > 0 and not passed(broken)


def test_the_fault_injection_load_test_catches_a_server_that_keeps_finished_sequences(tiny, monkeypatch):
    """Its memory check counts live tensors, not the allocator's resident pages: a server that keeps every finished
    sequence (and so its KV cache) fails it, though all its answers are right."""
    from verispec.serve import batch as batch_module
    from verispec.serve.faults import passed, run_faults
    kept = []
    drop = batch_module.Batch._drop_finished

    def keeping(self):
        done = drop(self)
        kept.extend(done)
        return done

    monkeypatch.setattr(batch_module.Batch, "_drop_finished", keeping)
    # each kept request holds its cache and features, about 0.4 MiB on this tiny model
    leaky = run_faults(Server(tiny, "plain", max_batch=4), PROMPTS[:3], clients=4, duration=2, max_tokens=200,
                       long_tokens=0, fault_every=2)
    assert leaky["lost"] == 0 and leaky["changed"] == 0 and kept
    assert leaky["live_growth_mb"] > 0.1 and not passed(leaky, slack_mb=0.1), leaky


def test_chunked_prefill_prepares_the_proposer_once_and_shows_it_every_prompt_position(tiny):
    """A proposer reading the target's features (EAGLE, Medusa) sees them all, in order, across the chunks, and
    is prepared once (a second `prepare` would drop what the earlier chunks showed it)."""
    from verispec.engine import GenerationConfig, Sequence
    from verispec.proposers.ngram import NgramProposer
    from verispec.sampling import SamplingConfig

    class Watching(NgramProposer):
        reads_features = True

        def __init__(self):
            super().__init__()
            self.prepared, self.seen = 0, []

        def prepare(self, capacity):
            self.prepared += 1

        def observe(self, hidden):
            self.seen.append(hidden.clone())

    ids = tiny.tokenizer.encode(" ".join(PROMPTS) * 3)
    cfg = GenerationConfig(max_new_tokens=2, k=2, sampling=SamplingConfig(0.0))
    whole, chunked = Watching(), Watching()
    Sequence(tiny.model, whole, ids, cfg, tiny.profile()).prefill()
    p = Prefill(Sequence(tiny.model, chunked, ids, cfg, tiny.profile()))
    while p.remaining:
        p.advance(10)
    assert chunked.prepared == whole.prepared == 1 and len(chunked.seen) > 1
    import torch
    assert torch.cat(chunked.seen).shape == torch.cat(whole.seen).shape == (len(ids), tiny.model.cfg.hidden_size)
    assert torch.equal(torch.cat(chunked.seen), torch.cat(whole.seen))          # bit for bit, on the kernels


def test_a_non_streaming_client_that_leaves_frees_its_job(tiny):
    server = Server(tiny, "plain", max_batch=2)
    slow(server, 0.02)                                                   # 400 tokens: 8 s
    with serving(server) as base:
        with pytest.raises(httpx.ReadTimeout):
            post(base, "/v1/completions", body(tiny, "Hello", max_tokens=400), timeout=1.0)
        deadline = time.time() + 3
        while metric(base, "verispec_requests_total", '{method="plain",outcome="disconnected"}') < 1:
            assert time.time() < deadline, "the abandoned request kept decoding"
            time.sleep(0.05)
        assert len(server.scheduler.batch) == 0 and server.kv.used == 0
