"""The OpenAI-compatible HTTP API: /v1/completions, /v1/chat/completions (both with stream=true), /v1/models,
/metrics (Prometheus) and /health, on FastAPI; decoding happens on the scheduler's thread.

Request fields: model, prompt or messages, max_tokens, temperature (default 1), top_p, seed, stop, stream,
stream_options.include_usage; the extra field `speculative` ({"method": ..., "k": ...}) overrides the server's
speculative method for one request. Errors come back as OpenAI-style bodies {"error": {"message", "type",
"param", "code"}} with the matching HTTP status.
"""
from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from contextlib import asynccontextmanager
from typing import Literal, Union

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..api import METHODS, Target, make_proposer
from ..engine import GenerationConfig, Sequence
from ..errors import VerispecError
from ..proposers.base import fork
from ..sampling import SamplingConfig
from .batch import Batch
from .metrics import Metrics
from .scheduler import Job, Scheduler
from .text import TextStream


class APIError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.code, self.param, self.kind = status, message, code, param, kind

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": self.message, "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


class Speculative(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: str | None = None
    k: Union[int, Literal["auto"], None] = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class Common(BaseModel):
    model: str
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float = Field(1.0, ge=0, le=2)
    top_p: float = Field(1.0, gt=0, le=1)
    seed: int | None = None
    stop: Union[str, list[str], None] = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(1, ge=1, le=1)
    speculative: Speculative | None = None


class CompletionRequest(Common):
    prompt: Union[str, list[str]]


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: Union[str, list[dict]]

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.get("text", "") for part in self.content if part.get("type") == "text")


class ChatRequest(Common):
    messages: list[Message] = Field(min_length=1)


class Server:
    """The model, its proposers (one loaded copy per method, forked per request), the batch and the metrics."""

    def __init__(self, target: Target, method: str = "ngram", k: int | str = "auto", max_batch: int = 16,
                 draft: str | None = None, name: str | None = None, tree: str | None = None):
        self.target, self.method, self.k, self.draft, self.tree = target, method, k, draft, tree  # tree: the
        # default method's --tree (other methods, requested per request, draft their default shape)
        self.name = name or os.path.basename(os.path.normpath(target.folder))
        self.metrics = Metrics()
        self.profile = target.profile()             # read once: auto k for every request and the batch
        self.scheduler = Scheduler(Batch(target.model, self.profile), self.metrics, max_batch)
        self._proposers, self._lock = {}, threading.Lock()
        self.proposer(method)                       # load the default method's weights now

    def proposer(self, method: str):
        if method not in METHODS:
            raise APIError(400, f"unknown speculative method {method!r}: choose from {', '.join(METHODS)}",
                           "invalid_method", "speculative.method")
        with self._lock:
            if method not in self._proposers:
                try:
                    self._proposers[method] = self.scheduler.call(      # weights load on the decoding thread
                        lambda: make_proposer(method, self.target, self.draft,
                                              tree=self.tree if method == self.method else None))
                except VerispecError as e:
                    raise APIError(400, str(e), "method_unavailable", "speculative.method") from None
        return fork(self._proposers[method])

    def job(self, req: Common, prompt_ids: list[int], default_max: int) -> Job:
        if req.model != self.name:
            raise APIError(404, f"The model `{req.model}` does not exist; this server has `{self.name}`",
                           "model_not_found", "model")
        spec = req.speculative or Speculative()
        method, k = spec.method or self.method, spec.k if spec.k is not None else self.k
        max_tokens = req.max_completion_tokens or req.max_tokens
        if max_tokens is not None and max_tokens < 1:
            raise APIError(400, f"max_tokens must be at least 1, got {max_tokens}", "invalid_value", "max_tokens")
        seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(4), "little")
        tok = self.target.tokenizer
        try:
            cfg = GenerationConfig(max_new_tokens=max_tokens or default_max, k=k, seed=seed,
                                   sampling=SamplingConfig(req.temperature, 0, req.top_p),
                                   stop_token_ids=tok.stop_token_ids)
            job = Job(method, asyncio.get_running_loop(), pinned=req.seed is not None and req.temperature > 0)
            job.sequence = Sequence(self.target.model, self.proposer(method), prompt_ids, cfg, self.profile,
                                    job.on_tokens)
        except VerispecError as e:
            code = "context_length_exceeded" if "context" in str(e) else "invalid_value"
            raise APIError(400, str(e), code) from None
        return job


def create_app(server: Server, decode_thread: bool = True) -> FastAPI:
    """The API over `server`; decode_thread=False leaves the decoding loop to the caller (Scheduler.run)."""
    @asynccontextmanager
    async def lifespan(app):
        if decode_thread:
            server.scheduler.start()
        yield
        if decode_thread:
            server.scheduler.stop()

    app = FastAPI(title="verispec", lifespan=lifespan)

    @app.exception_handler(APIError)
    async def api_error(request, e: APIError):
        server.metrics.rejected(e.code or "error")
        return e.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", ())[1:]) or None
        if first.get("type") == "json_invalid":
            return await api_error(request, APIError(400, "the request body is not valid JSON", "invalid_json"))
        return await api_error(request, APIError(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}",
                                                 "invalid_value", where))

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": server.name, "running": len(server.scheduler.batch)}

    @app.get("/metrics")
    async def metrics():
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": server.name, "object": "model", "created": 0,
                                            "owned_by": "verispec"}]}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        prompt = req.prompt if isinstance(req.prompt, str) else "".join(req.prompt)
        if not prompt:
            raise APIError(400, "the prompt is empty", "invalid_value", "prompt")
        ids = server.target.tokenizer.encode(prompt)
        return await respond(server, req, request, ids, 16, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request):
        tok = server.target.tokenizer
        try:
            text = tok.render_chat([{"role": m.role, "content": m.text()} for m in req.messages])
        except VerispecError as e:
            raise APIError(400, str(e), "invalid_value", "messages") from None
        except Exception as e:  # the model's own template rejected the conversation
            raise APIError(400, f"the chat template cannot render these messages: {e}", "invalid_value",
                           "messages") from None
        return await respond(server, req, request, tok.encode(text), 256, chat=True)

    return app


async def respond(server: Server, req: Common, request: Request, ids: list[int], default_max: int, chat: bool):
    job = server.job(req, ids, default_max)
    stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    text = TextStream(server.target.tokenizer, stops)
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    head = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": server.name}
    server.scheduler.submit(job)

    async def events():
        """(text piece, finish reason or None), until the job is done; cancels the job if abandoned."""
        try:
            while True:
                kind, *rest = await job.events.get()
                if kind == "error":
                    raise APIError(500, rest[0], "server_error", kind="server_error")
                if kind == "tokens":
                    piece = text.push(rest[0])
                    if text.stopped:
                        job.cancel("stop")
                        yield piece, "stop"
                        return
                    if piece:
                        yield piece, None
                else:
                    job.stats = rest[1]
                    yield text.flush(), "length" if rest[0] == "length" else "stop"
                    return
        finally:
            job.cancel("disconnected")       # no-op once finished; frees the slot if the client went away

    def usage() -> dict:
        return {"prompt_tokens": len(ids), "completion_tokens": text.tokens,
                "total_tokens": len(ids) + text.tokens}

    if not req.stream:
        parts, finish = [], None
        watcher = asyncio.create_task(watch_disconnect(request, job))
        try:
            async for piece, finish in events():
                parts.append(piece)
        finally:
            watcher.cancel()
        content = "".join(parts)
        choice = ({"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
                  if chat else {"index": 0, "text": content, "logprobs": None, "finish_reason": finish})
        return {**head, "choices": [choice], "usage": usage(),
                "speculative": speculative_summary(job)}

    chunk_head = {**head, "object": "chat.completion.chunk" if chat else "text_completion"}

    def sse(body: dict) -> str:
        return "data: " + json.dumps(body) + "\n\n"

    def chunk(piece: str | None, finish: str | None, role: bool = False) -> str:
        if chat:
            delta = ({"role": "assistant"} if role else {}) | ({"content": piece} if piece else {})
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish}
        return sse({**chunk_head, "choices": [choice]})

    async def stream():
        if chat:
            yield chunk(None, None, role=True)
        try:
            async for piece, finish in events():
                yield chunk(piece, finish)
        except APIError as e:
            yield sse({"error": {"message": e.message, "type": e.kind, "code": e.code}})
        if req.stream_options and req.stream_options.include_usage:
            yield sse({**chunk_head, "choices": [], "usage": usage()})
        yield "data: [DONE]\n\n"

    return StreamingResponse(stream(), media_type="text/event-stream")


async def watch_disconnect(request: Request, job: Job, every_s: float = 0.25) -> None:
    """Cancel the job of a non-streaming request whose client has gone away."""
    while not await request.is_disconnected():
        await asyncio.sleep(every_s)
    job.cancel("disconnected")


def speculative_summary(job: Job) -> dict:
    s = job.stats
    out = {"method": job.method}
    if s is not None:
        out.update(acceptance_rate=s.acceptance_rate, mean_accepted_tokens=s.mean_accepted_tokens,
                   drafted_tokens=s.drafted_tokens, accepted_tokens=s.accepted_tokens)
    return out
