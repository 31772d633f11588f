"""The HTTP server, through the official `openai` client on a loopback port: results equal offline decoding,
streaming, concurrency, stop strings, errors, a disconnecting client, and the metrics endpoint."""
import asyncio
import json
import time

import httpx
import openai
import pytest

from verispec.api import make_engine
from verispec.engine import GenerationConfig
from verispec.sampling import SamplingConfig
from verispec.serve.app import Server
from verispec.serve.loadtest import free_port, start_server

PROMPTS = [
    "Write a Python function that returns the squares of a list of numbers.",
    "Explain why the sky is blue in two sentences.",
    "List three uses of a paperclip.",
    "Translate to French: Good morning, how are you today?",
    "A train travels 60 miles per hour for 3 hours. How far does it go?",
    "Rewrite this sentence in the passive voice: The cat chased the mouse around the kitchen.",
]


@pytest.fixture(scope="module")
def served(target_bf16):
    server = Server(target_bf16, "ngram", "auto", max_batch=4, allowed_methods=["ngram", "plain", "draft", "medusa"])
    port = free_port()
    uv = start_server(server, port)
    base = f"http://127.0.0.1:{port}"
    yield server, base, openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
    uv.should_exit = True


def offline(target, prompt, max_new, chat=True, method="plain", temperature=0.0, seed=0) -> str:
    tok = target.tokenizer
    ids = tok.prompt_ids(prompt, chat)
    cfg = GenerationConfig(max_new_tokens=max_new, k="auto", seed=seed, sampling=SamplingConfig(temperature),
                           stop_token_ids=tok.stop_token_ids)
    return tok.decode(make_engine(method, target).generate(ids, cfg).token_ids)


def test_greedy_chat_and_completion_equal_offline_generate(served, target_bf16):
    server, _, client = served
    r = client.chat.completions.create(model=server.name, messages=[{"role": "user", "content": PROMPTS[0]}],
                                       max_tokens=40, temperature=0)
    assert r.choices[0].message.content == offline(target_bf16, PROMPTS[0], 40)
    assert r.usage.completion_tokens == 40 and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == len(target_bf16.tokenizer.prompt_ids(PROMPTS[0]))
    c = client.completions.create(model=server.name, prompt="The capital of France is", max_tokens=12,
                                  temperature=0)
    assert c.choices[0].text == offline(target_bf16, "The capital of France is", 12, chat=False)


def test_streaming_equals_non_streaming_and_reports_usage(served):
    server, _, client = served
    args = dict(model=server.name, messages=[{"role": "user", "content": PROMPTS[1]}], max_tokens=30,
                temperature=0)
    whole = client.chat.completions.create(**args).choices[0].message.content
    pieces, usage, finish = [], None, None
    for chunk in client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    assert "".join(pieces) == whole and len(pieces) > 3
    assert usage.completion_tokens == 30 and finish == "length"
    text = "".join(c.choices[0].text for c in client.completions.create(
        model=server.name, prompt="Once upon a time", max_tokens=20, temperature=0, stream=True))
    assert text == client.completions.create(model=server.name, prompt="Once upon a time", max_tokens=20,
                                             temperature=0).choices[0].text


def test_concurrent_requests_with_method_overrides_equal_offline(served, target_bf16):
    """Six requests at once (more than the batch's 4 slots: some wait, then join the running batch), four
    methods, greedy: each equals plain decoding offline."""
    server, base, _ = served
    methods = ["plain", "ngram", "draft", "medusa", "ngram", "draft"]

    async def main():
        client = openai.AsyncOpenAI(base_url=base + "/v1", api_key="none", max_retries=0, timeout=120)
        rs = await asyncio.gather(*(client.chat.completions.create(
            model=server.name, messages=[{"role": "user", "content": p}], max_tokens=32, temperature=0,
            extra_body={"speculative": {"method": m}}) for p, m in zip(PROMPTS, methods)))
        await client.close()
        return rs

    rs = asyncio.run(main())
    assert [r.choices[0].message.content for r in rs] == [offline(target_bf16, p, 32) for p in PROMPTS]
    assert [r.model_extra["speculative"]["method"] for r in rs] == methods


def test_a_server_of_eagle_trees_batches_them_and_equals_offline(target_bf16):
    """`serve --method eagle --tree dynamic+ngram`: dynamic trees with the n-gram path, packed into one batch
    with a chain request (another method), greedy: each equals plain decoding offline."""
    server = Server(target_bf16, "eagle", "auto", max_batch=4, tree="dynamic+ngram", allowed_methods=["eagle", "ngram"])
    port = free_port()
    uv = start_server(server, port)
    methods = ["eagle", "eagle", "ngram"]

    async def main():
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                                    timeout=120)
        rs = await asyncio.gather(*(client.chat.completions.create(
            model=server.name, messages=[{"role": "user", "content": p}], max_tokens=24, temperature=0,
            extra_body={"speculative": {"method": m}}) for p, m in zip(PROMPTS[1:], methods)))
        await client.close()
        return rs

    try:
        rs = asyncio.run(main())
    finally:
        uv.should_exit = True
    assert [r.choices[0].message.content for r in rs] == [offline(target_bf16, p, 24) for p in PROMPTS[1:4]]
    assert server._proposers["eagle"].mode == "dynamic" and server._proposers["eagle"].graft > 0


def test_seeded_sampling_is_reproducible_and_equals_offline(served, target_bf16):
    server, _, client = served
    args = dict(model=server.name, messages=[{"role": "user", "content": PROMPTS[2]}], max_tokens=24,
                temperature=1.0, seed=7)
    a = client.chat.completions.create(**args).choices[0].message.content
    b = client.chat.completions.create(**args).choices[0].message.content
    assert a == b == offline(target_bf16, PROMPTS[2], 24, method="ngram", temperature=1.0, seed=7)
    c = client.chat.completions.create(**{**args, "seed": 8}).choices[0].message.content
    assert c != a


def test_stop_strings_end_the_text_before_the_match(served, target_bf16):
    server, _, client = served
    full = offline(target_bf16, PROMPTS[1], 40)
    stop = full.split()[3]
    r = client.chat.completions.create(model=server.name, messages=[{"role": "user", "content": PROMPTS[1]}],
                                       max_tokens=40, temperature=0, stop=[stop, "zzzz"])
    assert r.choices[0].message.content == full[:full.index(stop)]
    assert r.choices[0].finish_reason == "stop" and r.usage.completion_tokens < 40
    count = "Count: one, two, three, four,"
    whole = offline(target_bf16, count, 30, chat=False)
    assert " six" in whole                              # else this test could not tell a working stop string
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=server.name, prompt=count, max_tokens=30, temperature=0, stop=" six", stream=True))
    assert streamed == whole[:whole.index(" six")]


def test_bad_requests_get_openai_errors_and_the_server_keeps_running(served):
    server, base, client = served
    msg = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-17", messages=msg)
    assert e.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=server.name, messages=msg, max_tokens=-3)
    assert "max_tokens" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.name, prompt="word " * 9000, max_tokens=10)
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=server.name, messages=msg, extra_body={"speculative": {"method": "x"}})
    assert e.value.code == "invalid_method"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=server.name, messages=msg, n=2, stream=True)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=server.name, messages=[{"role": "robot", "content": "x"}])
    r = httpx.post(base + "/v1/chat/completions", content=b'{"model": "x", "messages": [',
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    r = httpx.post(base + "/v1/completions", json={"model": server.name})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert httpx.get(base + "/health").json()["status"] == "ok"
    assert client.completions.create(model=server.name, prompt="Hello", max_tokens=3).usage.completion_tokens == 3


def metric(base: str, name: str, labels: str = "") -> float:
    for line in httpx.get(base + "/metrics").text.splitlines():
        if line.startswith(name + labels + " ") or (not labels and line.startswith(name + " ")):
            return float(line.split()[-1])
    return 0.0


def test_a_client_that_disconnects_mid_stream_frees_its_slot(served):
    server, base, _ = served
    before = metric(base, "verispec_requests_total", '{method="plain",outcome="disconnected"}')
    body = {"model": server.name, "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
            "max_tokens": 2000, "temperature": 0, "stream": True, "speculative": {"method": "plain"}}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["choices"][0]["delta"].get("content"):
                break                                   # one piece of text, then hang up
    deadline = time.time() + 30
    while metric(base, "verispec_requests_total", '{method="plain",outcome="disconnected"}') == before:
        assert time.time() < deadline, "the abandoned request kept decoding"
        time.sleep(0.1)
    assert metric(base, "verispec_requests_running") == 0 or len(server.scheduler.batch) == 0
    assert metric(base, "verispec_generation_tokens_total") > 0


def test_metrics_endpoint_reports_speculation_batches_and_latency(served):
    server, base, client = served
    client.chat.completions.create(model=server.name, messages=[{"role": "user", "content": PROMPTS[4]}],
                                   max_tokens=32, temperature=0, extra_body={"speculative": {"method": "draft"}})
    text = httpx.get(base + "/metrics").text
    for name in ("verispec_requests_total", "verispec_generation_tokens_total", "verispec_acceptance_rate",
                 "verispec_mean_accepted_tokens_per_pass", "verispec_accepted_tokens_by_position_total",
                 "verispec_batch_size_bucket", "verispec_time_to_first_token_seconds_bucket",
                 "verispec_time_per_output_token_seconds_bucket", "verispec_requests_waiting"):
        assert name in text, name
    assert 0 < metric(base, "verispec_acceptance_rate") <= 1
    assert metric(base, "verispec_mean_accepted_tokens_per_pass") > 1
    assert metric(base, "verispec_checked_draft_tokens_by_position_total", '{position="1"}') > 0


def test_weights_load_at_start_up_never_during_a_request(target_bf16, monkeypatch):
    """Every allowed method's proposer is built when the server starts; a request only forks it, and a method
    the server does not allow is refused without loading anything."""
    import verispec.serve.app as app
    built = []
    real = app.make_proposer
    monkeypatch.setattr(app, "make_proposer", lambda method, *a, **kw: built.append(method) or real(method, *a, **kw))
    server = Server(target_bf16, "plain", "auto", max_batch=2, allowed_methods=["plain", "ngram", "draft"])
    assert built == ["plain", "ngram", "draft"]
    assert server.proposer("draft") is not server._proposers["draft"]          # a fork: its own state
    with pytest.raises(app.APIError, match="not allowed") as e:
        server.proposer("medusa")
    assert e.value.code == "invalid_method" and built == ["plain", "ngram", "draft"]


def test_scheduler_call_runs_on_the_decoding_thread(target_bf16):
    """PyTorch work on any other live thread slows every later decoding step (OpenMP; see the scheduler's
    note), so work requested from the HTTP side runs on the decoding thread; its errors come back."""
    import threading
    server = Server(target_bf16, "plain", "auto", max_batch=2)
    server.scheduler.start()
    try:
        assert server.scheduler.call(lambda: threading.current_thread()) is server.scheduler.thread
        with pytest.raises(ZeroDivisionError):
            server.scheduler.call(lambda: 1 / 0)
    finally:
        server.scheduler.stop()
    with pytest.raises(RuntimeError, match="stop"):
        server.scheduler.call(lambda: 1)
