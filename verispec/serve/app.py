"""The OpenAI-compatible HTTP API: /v1/completions, /v1/chat/completions (both with stream=true), /v1/models,
/metrics (Prometheus) and /health, on FastAPI; decoding happens on the scheduler's thread.

Request fields: model, prompt (a string, or a list of strings: one choice each) or messages, max_tokens,
temperature (default 1), top_p, seed, stop, stream, stream_options.include_usage; the extra field `speculative`
({"method": ..., "k": ...}) overrides the server's speculative method for one request, among the methods the
server allows (their weights load at start-up, never during a request). Every error, unexpected ones included,
comes back as an OpenAI-style body {"error": {"message", "type", "param", "code"}} with the matching HTTP
status; the bounds a request must respect are in serve.limits, the API key and body size in serve.guard.

The event loop does no heavy work: tokenising and chat templates run on worker threads, detokenising is
incremental (O(1) a token), and all PyTorch work runs on the decoding thread.
"""
from __future__ import annotations

import asyncio
import os
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..api import METHODS, Target, engine_profile, make_proposer
from ..engine import Sequence
from ..errors import VerispecError
from ..generation import GenerationConfig
from ..model.rows import kv_bytes_per_token
from ..proposers.base import fork
from ..sampling import SamplingConfig
from .batch import Batch
from .errors import APIError, server_error, unavailable
from .guard import Guard
from .limits import KVBudget, Limits
from .metrics import Metrics
from .prefix import PrefixCache
from .protocol import ChatRequest, Common, CompletionRequest, Speculative
from .respond import respond
from .scheduler import Job, Refused, Scheduler

K_MAX_AUTO = 12                                  # the largest k "auto" chooses (GenerationConfig.k_max)


class Server:
    """The model, its proposers (one loaded copy per allowed method, forked per request), the batch, the limits
    and the metrics."""

    def __init__(self, target: Target, method: str = "ngram", k: int | str = "auto", max_batch: int = 16,
                 draft: str | None = None, name: str | None = None, tree: str | None = None,
                 limits: Limits | None = None, allowed_methods: list[str] | None = None,
                 api_key: str | None = None, prefill_chunk: int = 0, acceptance: str = "exact"):
        self.target, self.method, self.k, self.draft, self.tree = target, method, k, draft, tree  # tree: the
        # default method's --tree (other methods, requested per request, draft their default shape)
        self.name = name or os.path.basename(os.path.normpath(target.folder))
        self.limits, self.api_key = limits or Limits(), api_key
        self.context = self.limits.context(target.model.cfg.max_position)
        if prefill_chunk < 0:
            raise VerispecError(f"--prefill-chunk must be >= 0, got {prefill_chunk}")
        self.limits.check_k(k)
        self.metrics = Metrics()
        self.profile = target.profile()             # read once: auto k for every request and the batch
        self.kv = KVBudget(self.limits.kv_cache_mb, kv_bytes_per_token(target.model))
        prefix = PrefixCache(self.limits.prefix_cache_mb) if self.limits.prefix_cache_mb > 0 else None
        # a request's hidden states, logged for the prefix cache: a token's, counted as float32 (at most that)
        self._feature_bytes = target.model.cfg.hidden_size * 4
        self.scheduler = Scheduler(Batch(target.model, self.profile), self.metrics, max_batch, self.kv,
                                   self.limits.max_waiting, prefill_chunk, prefix)
        allowed = allowed_methods or list(dict.fromkeys([method, "plain", "ngram"]))
        if method not in allowed:
            raise VerispecError(f"--allowed-methods must include the default method {method!r}")
        self._proposers = {}
        for m in allowed:                           # every allowed method's weights load now, never later
            self._proposers[m] = self._load(m)
            # a draft model's c, measured on this machine once (the batch shares this profile object)
            self.profile.draft_cost.update(engine_profile(target, self._proposers[m], draft, self.profile).draft_cost)
        self.acceptance = acceptance                # "typical": LOSSY, tree methods only (Sequence checks)
        if acceptance == "typical" and not self._proposers[method].makes_trees:
            raise VerispecError(f"--acceptance typical needs a tree method (draft-tree, medusa, eagle), not {method}")

    def _load(self, method: str):
        if method not in METHODS:
            raise APIError(400, f"unknown speculative method {method!r}: choose from {', '.join(METHODS)}",
                           "invalid_method", "speculative.method")
        try:
            return self.scheduler.call(                 # on the decoding thread, if one runs already
                lambda: make_proposer(method, self.target, self.draft, tree=self.tree if method == self.method
                                      else None))
        except VerispecError as e:
            raise APIError(400, str(e), "method_unavailable", "speculative.method") from None

    def proposer(self, method: str):
        """A fresh proposer of an allowed method (its loaded weights, its own per-sequence state)."""
        if method not in self._proposers:
            what = "is not allowed on this server" if method in METHODS else "is unknown"
            raise APIError(400, f"speculative method {method!r} {what}: choose from {', '.join(self._proposers)}",
                           "invalid_method", "speculative.method")
        return fork(self._proposers[method])

    def job(self, req: Common, prompt_ids: list[int], default_max: int, choice: int = 0) -> Job:
        """A checked job for one prompt (not yet submitted); choice j of n samples with the seed + j."""
        if req.model != self.name:
            raise APIError(404, f"The model `{req.model}` does not exist; this server has `{self.name}`",
                           "model_not_found", "model")
        spec = req.speculative or Speculative()
        method, k = spec.method or self.method, spec.k if spec.k is not None else self.k
        self.limits.check_k(k)
        self.limits.check_stops(req.stops())
        proposer, k_max = self.proposer(method), min(K_MAX_AUTO, self.limits.max_k)
        asked = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens   # (0 too)
        max_tokens = self.limits.completion_tokens(asked, default_max,
                                                   len(prompt_ids), self.context,
                                                   "messages" if isinstance(req, ChatRequest) else "prompt")
        seed = (req.seed + choice) % 2 ** 64 if req.seed is not None else int.from_bytes(os.urandom(4), "little")
        tok = self.target.tokenizer
        try:
            cfg = GenerationConfig(max_new_tokens=max_tokens, k=k, seed=seed, k_max=k_max,
                                   acceptance=self.acceptance if proposer is not None and proposer.makes_trees
                                   else "exact",
                                   sampling=SamplingConfig(req.temperature, 0, req.top_p),
                                   stop_token_ids=tok.stop_token_ids)
            job = Job(method, asyncio.get_running_loop(), pinned=req.seed is not None and req.temperature > 0)
            job.sequence = Sequence(self.target.model, proposer, prompt_ids, cfg, self.profile, job.on_tokens)
        except VerispecError as e:
            code = "context_length_exceeded" if "context" in str(e) else "invalid_value"
            raise APIError(400, str(e), code) from None
        prefix = self.scheduler.prefix                    # Sequence.features: logged for a prompt it would keep
        logged = self._feature_bytes if prefix is not None and prefix.keeps(prompt_ids) else 0
        job.kv_need = self.kv.need(job.sequence.capacity, (proposer.kv_bytes_per_token() if proposer else 0) + logged)
        self.kv.check(job.kv_need)
        return job

    def submit(self, job: Job) -> None:
        try:
            self.scheduler.submit(job)
        except Refused as e:
            raise (self.limits.queue_full() if e.full else unavailable(str(e))) from None


def create_app(server: Server, decode_thread: bool = True):
    """The API over `server` (an ASGI app); decode_thread=False leaves the decoding loop to the caller
    (Scheduler.run)."""
    @asynccontextmanager
    async def lifespan(app):
        if decode_thread:
            server.scheduler.start()
        yield
        if decode_thread:
            server.scheduler.stop()

    app = FastAPI(title="verispec", lifespan=lifespan)
    tok = server.target.tokenizer

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
        if first.get("type") in ("model_attributes_type", "dict_type") and where is None:
            return await api_error(request, APIError(400, "the request body must be a JSON object (and sent with "
                                                          "Content-Type: application/json)", "invalid_json"))
        return await api_error(request, APIError(400, f"{where or 'body'}: {first.get('msg', 'invalid request')}",
                                                 "invalid_value", where))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request, e: StarletteHTTPException):    # the framework's own: OpenAI-style too
        message = {404: f"no such route: {request.method} {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}",
                   400: "the request body could not be read: send UTF-8 JSON"}.get(e.status_code, str(e.detail))
        code = {404: "not_found", 405: "method_not_allowed", 400: "invalid_json"}.get(e.status_code)
        return await api_error(request, APIError(e.status_code, message, code, headers=dict(e.headers or {})))

    @app.exception_handler(Exception)
    async def unexpected(request, e: Exception):           # never a bare 500 or a traceback
        return await api_error(request, server_error(f"internal error: {type(e).__name__}: {e}"))

    @app.get("/health")
    async def health():
        if not server.scheduler.alive:
            return JSONResponse({"status": "error", "model": server.name,
                                 "error": f"the decoding loop is not running ({server.scheduler.dead or 'stopped'})"},
                                status_code=503)
        return {"status": "ok", "model": server.name, "running": len(server.scheduler.batch),
                "waiting": server.scheduler.pending}

    @app.get("/metrics")
    async def metrics():
        return Response(server.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": server.name, "object": "model", "created": 0,
                                            "owned_by": "verispec"}]}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request):
        prompts = req.prompts()
        if not prompts or not all(prompts):
            raise APIError(400, "the prompt is empty", "invalid_value", "prompt")
        if len(prompts) * req.n > server.limits.max_waiting:         # refused before any work is done for it
            raise APIError(400, f"a request may ask for at most {server.limits.max_waiting} choices (prompts times "
                                f"n, this server's --max-waiting); this one asks for {len(prompts) * req.n}",
                           "invalid_value", "prompt")
        if req.stream and len(prompts) > 1:
            raise APIError(400, "streaming takes one prompt; send a list of prompts without stream",
                           "invalid_value", "prompt")
        check_stream(req)
        ids = await asyncio.to_thread(lambda: [tok.encode(p) for p in prompts])    # off the event loop
        return await respond(server, req, request, ids, 16, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request):
        check_stream(req)
        messages = [{"role": m.role, "content": m.text()} for m in req.messages]
        try:
            ids = await asyncio.to_thread(lambda: tok.chat_ids(messages))   # off the event loop
        except VerispecError as e:
            raise APIError(400, str(e), "invalid_value", "messages") from None
        except Exception as e:  # the model's own template rejected the conversation (or the sandbox did)
            raise APIError(400, f"the chat template cannot render these messages: {e}", "invalid_value",
                           "messages") from None
        return await respond(server, req, request, [ids], 256, chat=True)

    def check_stream(req: Common) -> None:
        if req.stream and req.n > 1:
            raise APIError(400, "streaming gives one choice; send n > 1 without stream", "invalid_value", "n")

    return Guard(app, server.api_key, server.limits.max_body_bytes,
                 on_reject=lambda code: server.metrics.rejected(code))
