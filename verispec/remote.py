"""A client of any OpenAI-compatible endpoint (verispec serve, vLLM, SGLang, llama.cpp's servers): what
`verispec audit --url` and `verispec bench --url` send and read.

- `Endpoint`: one server's /v1 base, model id (asked of /v1/models unless given) and API key;
- `sample`: N completions of one prompt with distinct seeds, a few at a time, each as a `Sample`: its text, and
  its tokens and their log-probabilities where the server returns them (it is always asked);
- `timed`: one streamed completion with its time to first token and total time;
- `speculation_counters`: the drafted / accepted token counters a server exports on /metrics (verispec's,
  vLLM's), so a benchmark can report acceptance where the server measures it.
Every network or protocol failure is a one-line VerispecError naming the endpoint.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import time
from dataclasses import dataclass

import httpx

from .errors import VerispecError

# Prometheus counters of speculative decoding: (drafted, accepted), by server
SPEC_COUNTERS = {"verispec": ("verispec_draft_tokens_total", "verispec_accepted_tokens_total"),
                 "vllm": ("vllm:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_accepted_tokens_total")}


@dataclass
class Sample:
    text: str
    finish_reason: str | None
    tokens: list[str] | None = None          # as the server names them, where it returns logprobs
    logprobs: list[float] | None = None      # of each returned token, under the server's own model


@dataclass
class Endpoint:
    url: str                                 # http://host:port or http://host:port/v1
    model: str | None = None
    api_key: str | None = None
    chat: bool = True                        # /v1/chat/completions (the chat template), else /v1/completions
    timeout: float = 600.0

    def __post_init__(self):
        base = self.url.rstrip("/")
        if not re.match(r"^https?://[^/\s]+", base):
            raise VerispecError(f"--url {self.url!r} is not an http(s) URL such as http://127.0.0.1:8000")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.root = self.base[:-3]
        key = self.api_key or os.environ.get("VERISPEC_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def _fail(self, what: str, e: Exception | str) -> VerispecError:
        return VerispecError(f"{self.base}: {what}: {e}")

    def resolve_model(self) -> str:
        """The model id to request: --remote-model, else the first one /v1/models lists."""
        if self.model is None:
            body = self._get_json("/models")
            try:
                self.model = body["data"][0]["id"]
            except (KeyError, IndexError, TypeError):
                raise self._fail("GET /models", "no model listed") from None
        return self.model

    def _get_json(self, path: str) -> dict:
        try:
            r = httpx.get(self.base + path, headers=self.headers, timeout=30)
        except httpx.HTTPError as e:
            raise self._fail(f"GET {path}", f"{type(e).__name__}: {e}") from None
        return self._json(r, f"GET {path}")

    def _json(self, r: httpx.Response, what: str) -> dict:
        try:
            body = r.json()
        except ValueError:
            raise self._fail(what, f"HTTP {r.status_code}, not JSON: {r.text[:200]!r}") from None
        if r.status_code != 200:
            err = body.get("error") if isinstance(body, dict) else None
            msg = err.get("message") if isinstance(err, dict) else err or body
            raise self._fail(what, f"HTTP {r.status_code}: {msg}")
        return body

    def body(self, prompt: str, max_tokens: int, temperature: float, top_p: float, seed: int | None,
             extra: dict | None = None, logprobs: bool = True) -> dict:
        b = {"model": self.resolve_model(), "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p,
             **({"seed": seed} if seed is not None else {}), **(extra or {})}
        if self.chat:
            b["messages"] = [{"role": "user", "content": prompt}]
            if logprobs:
                b["logprobs"] = True
        else:
            b["prompt"] = prompt
            if logprobs:
                b["logprobs"] = 1
        return b

    @property
    def path(self) -> str:
        return "/chat/completions" if self.chat else "/completions"

    async def complete(self, client: httpx.AsyncClient, body: dict) -> Sample:
        try:
            r = await client.post(self.base + self.path, json=body, headers=self.headers, timeout=self.timeout)
        except httpx.HTTPError as e:
            raise self._fail(f"POST {self.path}", f"{type(e).__name__}: {e}") from None
        out = self._json(r, f"POST {self.path}")
        try:
            choice = out["choices"][0]
            text = choice["message"]["content"] if self.chat else choice["text"]
        except (KeyError, IndexError, TypeError):
            raise self._fail(f"POST {self.path}", f"no choice in the answer: {json.dumps(out)[:200]}") from None
        tokens, logprobs = _logprobs(choice.get("logprobs"))
        return Sample(text or "", choice.get("finish_reason"), tokens, logprobs)


def _logprobs(lp) -> tuple[list[str] | None, list[float] | None]:
    """(tokens, their log-probabilities) from a choice's `logprobs`, in the chat or the completions shape."""
    if not isinstance(lp, dict):
        return None, None
    if isinstance(lp.get("content"), list):                                    # chat: [{token, logprob}, ...]
        items = lp["content"]
        return [str(x.get("token")) for x in items], [float(x.get("logprob") or 0.0) for x in items]
    if isinstance(lp.get("tokens"), list) and isinstance(lp.get("token_logprobs"), list):     # completions
        return [str(t) for t in lp["tokens"]], [float(x or 0.0) for x in lp["token_logprobs"]]
    return None, None


def sample(endpoint: Endpoint, prompt: str, samples: int, seed0: int, max_tokens: int, temperature: float,
           top_p: float, concurrency: int = 8, extra: dict | None = None, progress=None) -> list[Sample]:
    """`samples` completions of `prompt`, sample i with seed seed0 + i, at most `concurrency` in flight."""
    async def run():
        gate = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient() as client:
            async def one(i):
                async with gate:
                    s = await endpoint.complete(client, endpoint.body(prompt, max_tokens, temperature, top_p,
                                                                      seed0 + i, extra))
                    if progress is not None:
                        progress.update(1)
                    return s
            return await asyncio.gather(*(one(i) for i in range(samples)))
    endpoint.resolve_model()
    return list(asyncio.run(run()))


@dataclass
class Timed:
    text: str
    completion_tokens: int          # the server's usage figure, else the streamed chunks with text
    ttft_s: float
    total_s: float


def timed(endpoint: Endpoint, prompt: str, max_tokens: int, temperature: float, top_p: float, seed: int,
          extra: dict | None = None) -> Timed:
    """One streamed completion, timed from the request to the first text and to the end."""
    body = {**endpoint.body(prompt, max_tokens, temperature, top_p, seed, extra, logprobs=False),
            "stream": True, "stream_options": {"include_usage": True}}
    parts, chunks, usage, first = [], 0, None, None
    t0 = time.perf_counter()
    try:
        with httpx.stream("POST", endpoint.base + endpoint.path, json=body, headers=endpoint.headers,
                          timeout=endpoint.timeout) as r:
            if r.status_code != 200:
                r.read()
                endpoint._json(r, f"POST {endpoint.path}")
            for line in r.iter_lines():
                if not line.startswith("data:") or line.strip() == "data: [DONE]":
                    continue
                event = json.loads(line[5:])
                if "error" in event:
                    raise endpoint._fail(f"POST {endpoint.path}", event["error"].get("message", event["error"]))
                usage = event.get("usage") or usage
                for c in event.get("choices") or []:
                    piece = (c.get("delta") or {}).get("content") if endpoint.chat else c.get("text")
                    if piece:
                        first = first or time.perf_counter()
                        parts.append(piece)
                        chunks += 1
    except httpx.HTTPError as e:
        raise endpoint._fail(f"POST {endpoint.path}", f"{type(e).__name__}: {e}") from None
    except ValueError as e:
        raise endpoint._fail(f"POST {endpoint.path}", f"a stream event is not JSON: {e}") from None
    end = time.perf_counter()
    n = int(usage["completion_tokens"]) if usage and usage.get("completion_tokens") is not None else chunks
    return Timed("".join(parts), n, (first or end) - t0, end - t0)


def speculation_counters(endpoint: Endpoint) -> tuple[str, float, float] | None:
    """(server kind, drafted, accepted) from the endpoint's /metrics, or None where it exports neither set."""
    try:
        r = httpx.get(endpoint.root + "/metrics", headers=endpoint.headers, timeout=10)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    values: dict[str, float] = {}
    for line in r.text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{")[0].split(" ")[0]
            try:
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[-1])   # summed over labels
            except ValueError:
                continue
    for kind, (drafted, accepted) in SPEC_COUNTERS.items():
        if drafted in values and accepted in values:
            return kind, values[drafted], values[accepted]
    return None
