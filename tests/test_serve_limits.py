"""The server's limits, API key, allowed methods and error bodies, on a tiny random model (fp32): each test
asserts the refusal the limit produces, so it fails when the limit is switched off."""
import threading
import time

import httpx
import openai
import pytest

from serving import post, serving
from verispec.api import Target
from verispec.errors import VerispecError
from verispec.model.rows import kv_bytes_per_token
from verispec.serve.app import Server
from verispec.serve.limits import Limits


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return Target.load(str(tiny_dir), "fp32", "cpu")


def name(target) -> str:
    return target.folder.rstrip("/").split("/")[-1]


def completion(target, prompt, **kw) -> dict:
    return {"model": name(target), "prompt": prompt, "temperature": 0, **kw}


def error(r: httpx.Response, status: int) -> dict:
    assert r.status_code == status, r.text
    return r.json()["error"]


def test_max_model_len_counts_prompt_and_completion(tiny):
    server = Server(tiny, "plain", limits=Limits(max_model_len=48))
    prompt = "one two three four five six seven eight nine ten " * 2              # 20 tokens
    n = len(tiny.tokenizer.encode(prompt))
    with serving(server) as base:
        assert post(base, "/v1/completions", completion(tiny, prompt, max_tokens=48 - n)).status_code == 200
        e = error(post(base, "/v1/completions", completion(tiny, prompt, max_tokens=49 - n)), 400)
        assert e["code"] == "context_length_exceeded" and "48" in e["message"]
        e = error(post(base, "/v1/completions", completion(tiny, prompt * 3, max_tokens=1)), 400)
        assert e["code"] == "context_length_exceeded" and e["param"] == "prompt"
    with pytest.raises(VerispecError, match="exceeds the model's context"):
        Server(tiny, "plain", limits=Limits(max_model_len=513))


def test_a_prompt_near_the_end_of_the_context_gets_the_room_left(tiny):
    """Without max_tokens, a prompt that leaves less than the default is answered with what the model's context
    leaves, not refused; a request for all of it is answered with speculation too (no context is kept back for
    the passes that check drafts), with plain decoding's tokens."""
    server = Server(tiny, "plain", allowed_methods=["plain", "ngram"])
    prompt = "one" + " one" * 499
    n = len(tiny.tokenizer.encode(prompt))
    assert n == 500                          # room for 12 tokens, below the default of 16
    with serving(server) as base:
        texts = []
        for spec in ({"method": "plain"}, {"method": "ngram", "k": 6}):
            r = post(base, "/v1/completions", completion(tiny, prompt, speculative=spec, stop=None))
            assert r.status_code == 200, r.text
            usage = r.json()["usage"]
            assert usage["prompt_tokens"] == n and usage["completion_tokens"] <= 512 - n < 16
            r = post(base, "/v1/completions", completion(tiny, prompt, max_tokens=512 - n, speculative=spec,
                                                         stop=None))
            assert r.status_code == 200, r.text
            texts.append(r.json()["choices"][0]["text"])
        assert texts[0] == texts[1]
        e = error(post(base, "/v1/completions", completion(tiny, prompt, max_tokens=513 - n,
                                                           speculative={"method": "ngram", "k": 6})), 400)
        assert e["code"] == "context_length_exceeded" and "512" in e["message"], e


def test_max_tokens_is_a_cap_that_rejects_and_bounds_the_default(tiny):
    server = Server(tiny, "plain", limits=Limits(max_tokens=5))
    with serving(server) as base:
        e = error(post(base, "/v1/completions", completion(tiny, "Hello", max_tokens=6)), 400)
        assert e["param"] == "max_tokens" and "at most 5" in e["message"]
        r = post(base, "/v1/completions", completion(tiny, "Hello", max_tokens=5)).json()
        assert r["usage"]["completion_tokens"] <= 5
        r = post(base, "/v1/chat/completions", {"model": name(tiny), "messages": [{"role": "user", "content": "Hi"}],
                                                 "temperature": 0}).json()       # chat's default 256, capped
        assert 0 < r["usage"]["completion_tokens"] <= 5


def test_a_full_waiting_queue_answers_429_with_retry_after(tiny):
    """Nothing decodes here (no decoding thread): the first request waits, the second finds the queue full."""
    server = Server(tiny, "plain", limits=Limits(max_waiting=1))
    with serving(server, decode_thread=False) as base:
        first = threading.Thread(target=lambda: pytest.raises(httpx.HTTPError, post, base, "/v1/completions",
                                                              completion(tiny, "Hello"), timeout=3))
        first.start()
        deadline = time.time() + 10
        while server.scheduler.pending < 1:
            assert time.time() < deadline
            time.sleep(0.02)
        r = post(base, "/v1/completions", completion(tiny, "Hello"))
        e = error(r, 429)
        assert e["code"] == "rate_limit_exceeded" and r.headers["retry-after"] == "1"
        first.join()


def test_the_kv_budget_admits_requests_by_the_cache_they_need(tiny):
    """A budget of 100 token slots: a request needing more is refused; two needing 54 each decode one after the
    other (never together), and both give their alone-output."""
    per_token = kv_bytes_per_token(tiny.model)
    server = Server(tiny, "plain", max_batch=4, limits=Limits(kv_cache_mb=100 * per_token / 2 ** 20))
    together = []
    server.scheduler.batch.fault = lambda seq: together.append(len(server.scheduler.batch.running))
    prompt = "a b c d e f g h"                                          # 8 tokens: two caches of 8 + 45 + 1 > 100 slots
    with serving(server) as base:
        e = error(post(base, "/v1/completions", completion(tiny, prompt, max_tokens=95)), 400)
        assert e["code"] == "kv_budget_exceeded"
        alone = post(base, "/v1/completions", completion(tiny, prompt, max_tokens=45)).json()["choices"][0]["text"]
        together.clear()
        out = [None, None]

        def run(i):
            out[i] = post(base, "/v1/completions", completion(tiny, prompt, max_tokens=45)).json()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [o["choices"][0]["text"] for o in out] == [alone, alone]
    assert together and max(together) == 1 and server.kv.used == 0


def test_the_kv_budget_counts_a_draft_models_cache(tiny, tiny_dir):
    """A draft model keeps a KV cache per sequence beside the target's: a request decoded with it needs both. A
    budget of 100 target slots and a draft as large as the target: 54 slots fit plainly, not with the draft (108)."""
    per_token = kv_bytes_per_token(tiny.model)
    server = Server(tiny, "draft", draft=str(tiny_dir), limits=Limits(kv_cache_mb=100 * per_token / 2 ** 20),
                    allowed_methods=["draft", "plain"])
    prompt = "a b c d e f g h"                                          # 8 tokens: 8 + 45 + 1 = 54 slots
    with serving(server) as base:
        e = error(post(base, "/v1/completions", completion(tiny, prompt, max_tokens=45)), 400)
        assert e["code"] == "kv_budget_exceeded"
        plainly = completion(tiny, prompt, max_tokens=45, speculative={"method": "plain"})
        assert post(base, "/v1/completions", plainly).status_code == 200
        assert post(base, "/v1/completions", completion(tiny, prompt, max_tokens=20)).status_code == 200   # 58
    assert server.kv.used == 0


def test_the_kv_budget_counts_the_hidden_states_kept_for_the_prefix_cache(tiny):
    """With the prefix cache on, a request whose prompt it would keep logs a hidden state per cached token (64
    floats here, half a KV slot): a budget that holds the request's KV cache alone no longer holds it."""
    per_token = kv_bytes_per_token(tiny.model)
    prompt = "one" + " one" * 29                                        # 30 tokens: 30 + 20 + 1 = 51 slots
    for cache_mb, status in ((0, 200), (1, 400)):
        server = Server(tiny, "plain", limits=Limits(kv_cache_mb=60 * per_token / 2 ** 20,
                                                     prefix_cache_mb=cache_mb))
        with serving(server) as base:
            r = post(base, "/v1/completions", completion(tiny, prompt, max_tokens=20))
            assert r.status_code == status, r.text
            assert status == 200 or r.json()["error"]["code"] == "kv_budget_exceeded"


def test_k_is_capped_by_the_server(tiny):
    server = Server(tiny, "ngram", limits=Limits(max_k=4))
    with serving(server) as base:
        e = error(post(base, "/v1/completions", completion(tiny, "a b a b", speculative={"k": 5})), 400)
        assert e["param"] == "speculative.k" and "1..4" in e["message"]
        assert post(base, "/v1/completions", completion(tiny, "a b a b", speculative={"k": 4})).status_code == 200
    with pytest.raises(Exception, match="1..4"):
        Server(tiny, "ngram", k=5, limits=Limits(max_k=4))


def test_bodies_over_the_limit_get_413_with_or_without_content_length(tiny):
    server = Server(tiny, "plain", limits=Limits(max_body_bytes=2000))
    big = completion(tiny, "word " * 500)
    with serving(server) as base:
        assert error(post(base, "/v1/completions", big), 413)["code"] == "request_too_large"
        import json
        data = json.dumps(big).encode()
        r = httpx.post(base + "/v1/completions", content=iter([data[:1000], data[1000:]]),   # chunked, no length
                       headers={"content-type": "application/json"})
        assert error(r, 413)["code"] == "request_too_large"
        assert post(base, "/v1/completions", completion(tiny, "word " * 50, max_tokens=2)).status_code == 200


def test_stop_strings_are_bounded_in_number_and_length(tiny):
    server = Server(tiny, "plain", limits=Limits(max_stops=2, max_stop_chars=10))
    with serving(server) as base:
        e = error(post(base, "/v1/completions", completion(tiny, "Hi", stop=["a", "b", "c"])), 400)
        assert e["param"] == "stop" and "at most 2" in e["message"]
        e = error(post(base, "/v1/completions", completion(tiny, "Hi", stop="x" * 11)), 400)
        assert e["param"] == "stop"
        assert post(base, "/v1/completions", completion(tiny, "Hi", stop=["a", "x" * 10])).status_code == 200


def test_the_api_key_guards_every_v1_route_and_leaves_health_and_metrics_open(tiny):
    server = Server(tiny, "plain", api_key="s3cret")
    with serving(server) as base:
        for path in ("/v1/models",):
            assert error(httpx.get(base + path), 401)["code"] == "invalid_api_key"
            assert httpx.get(base + path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert httpx.get(base + path, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert error(post(base, "/v1/completions", completion(tiny, "Hi")), 401)["code"] == "invalid_api_key"
        assert error(post(base, "/v1/chat/completions", {}), 401)["code"] == "invalid_api_key"
        assert httpx.get(base + "/health").status_code == 200 and httpx.get(base + "/metrics").status_code == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base + "/v1", api_key="nope", max_retries=0).models.list()
        client = openai.OpenAI(base_url=base + "/v1", api_key="s3cret", max_retries=0)
        assert client.completions.create(model=name(tiny), prompt="Hi", max_tokens=2).usage.completion_tokens <= 2


def test_clients_may_ask_only_for_allowed_methods(tiny):
    server = Server(tiny, "plain", allowed_methods=["plain"])
    with serving(server) as base:
        e = error(post(base, "/v1/completions", completion(tiny, "Hi", speculative={"method": "ngram"})), 400)
        assert e["code"] == "invalid_method" and "not allowed" in e["message"]
        e = error(post(base, "/v1/completions", completion(tiny, "Hi", speculative={"method": "bogus"})), 400)
        assert e["code"] == "invalid_method"
    assert list(server._proposers) == ["plain"]
    with pytest.raises(VerispecError, match="default method"):
        Server(tiny, "ngram", allowed_methods=["plain"])


def test_every_error_is_an_openai_body_never_a_bare_500(tiny, monkeypatch):
    server = Server(tiny, "plain")
    with serving(server) as base:
        e = error(post(base, "/v1/completions", completion(tiny, "Hi", seed=2 ** 64)), 400)
        assert e["param"] == "seed"
        assert post(base, "/v1/completions", completion(tiny, "Hi", seed=2 ** 64 - 1, max_tokens=2)).status_code == 200
        monkeypatch.setattr(server, "job", lambda *a: 1 / 0)
        e = error(post(base, "/v1/completions", completion(tiny, "Hi")), 500)
        assert e["type"] == "server_error" and "ZeroDivisionError" in e["message"]


def test_a_list_of_prompts_gives_one_choice_per_prompt(tiny):
    server = Server(tiny, "plain")
    prompts = ["The sea is", "One two three", "Hello"]
    with serving(server) as base:
        alone = [post(base, "/v1/completions", completion(tiny, p, max_tokens=6)).json()["choices"][0]["text"]
                 for p in prompts]
        r = post(base, "/v1/completions", completion(tiny, prompts, max_tokens=6)).json()
        assert [c["index"] for c in r["choices"]] == [0, 1, 2]
        assert [c["text"] for c in r["choices"]] == alone
        assert r["usage"]["prompt_tokens"] == sum(len(tiny.tokenizer.encode(p)) for p in prompts)
        e = error(post(base, "/v1/completions", completion(tiny, prompts, stream=True)), 400)
        assert e["param"] == "prompt"
        assert error(post(base, "/v1/completions", completion(tiny, ["a", ""])), 400)["param"] == "prompt"


def test_tokenising_and_templates_run_off_the_event_loop(tiny, monkeypatch):
    """The HTTP thread (uvicorn's event loop) never tokenises or renders a template itself."""
    server = Server(tiny, "plain")
    tok, seen = tiny.tokenizer, []
    for fn in ("encode", "render_chat"):
        real = getattr(tok, fn)
        monkeypatch.setattr(tok, fn, lambda *a, _real=real: seen.append(threading.current_thread().name) or _real(*a))
    with serving(server) as base:
        assert post(base, "/v1/completions", completion(tiny, "Hi", max_tokens=2)).status_code == 200
        assert post(base, "/v1/chat/completions", {"model": name(tiny), "max_tokens": 2,
                                                   "messages": [{"role": "user", "content": "Hi"}]}).status_code == 200
    assert len(seen) == 3 and "verispec-http" not in seen


def test_n_choices_sample_with_consecutive_seeds(tiny):
    server = Server(tiny, "plain")
    args = dict(max_tokens=8, temperature=1.0)
    with serving(server) as base:
        alone = [post(base, "/v1/completions", completion(tiny, "The sea is", seed=5 + j, **args)).json()
                 ["choices"][0]["text"] for j in range(3)]
        r = post(base, "/v1/completions", completion(tiny, ["The sea is", "Hello"], seed=5, n=3, **args)).json()
        assert [c["index"] for c in r["choices"]] == list(range(6))
        assert [c["text"] for c in r["choices"][:3]] == alone and len(set(alone)) > 1
        chat = {"model": name(tiny), "messages": [{"role": "user", "content": "Hi"}], "n": 2, "seed": 1, **args}
        assert len(post(base, "/v1/chat/completions", chat).json()["choices"]) == 2
        assert error(post(base, "/v1/chat/completions", {**chat, "stream": True}), 400)["param"] == "n"
