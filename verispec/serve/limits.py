"""What one server accepts: every bound a request must respect, each with the OpenAI-style error that answers it.

Limits (the `serve` flags map onto them one to one):
  max_model_len     prompt + completion tokens of one request                      -> 400 context_length_exceeded
  max_tokens        the completion tokens a request may ask for (rejected, never clamped) -> 400
  max_waiting       requests accepted but not yet decoding                         -> 429, with Retry-After
  kv_cache_mb       KV cache memory of all admitted sequences: a request is admitted when the cache it needs
                    (prompt + max_tokens + draft slack, in tokens, times the bytes a token takes) fits; one that
                    could never fit                                               -> 400 kv_budget_exceeded
  prefix_cache_mb   memory for kept prompts' caches, whose prefixes later prompts reuse (serve.prefix; 0: none)
  max_k             speculative.k (a draft step and a metric series per position)  -> 400
  max_body_bytes    the request body                                               -> 413
  max_stops, max_stop_chars   the number and length of stop strings               -> 400
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import VerispecError
from .errors import APIError


@dataclass(frozen=True)
class Limits:
    max_model_len: int | None = None       # None: the model's context
    max_tokens: int = 4096
    max_waiting: int = 256
    kv_cache_mb: float = 2048.0
    max_k: int = 16
    max_body_bytes: int = 1 << 20
    max_stops: int = 4
    max_stop_chars: int = 128
    retry_after_s: int = 1
    prefix_cache_mb: float = 1024.0        # kept prompts' caches (serve.prefix); 0: none

    def __post_init__(self):
        for name in ("max_tokens", "max_waiting", "max_k", "max_body_bytes", "max_stops", "max_stop_chars"):
            if getattr(self, name) < 1:
                raise VerispecError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if not 0 < self.kv_cache_mb < float("inf"):           # (not NaN either)
            raise VerispecError(f"--kv-cache-mb must be > 0, got {self.kv_cache_mb}")
        if not 0 <= self.prefix_cache_mb < float("inf"):
            raise VerispecError(f"--prefix-cache-mb must be >= 0, got {self.prefix_cache_mb}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise VerispecError(f"--max-model-len must be >= 2, got {self.max_model_len}")

    def context(self, model_context: int) -> int:
        """The longest request (prompt + completion tokens) this server takes."""
        if self.max_model_len is not None and self.max_model_len > model_context:
            raise VerispecError(f"--max-model-len {self.max_model_len} exceeds the model's context of "
                                f"{model_context} tokens")
        return self.max_model_len or model_context

    def check_k(self, k) -> None:
        if isinstance(k, int) and not 1 <= k <= self.max_k:
            raise APIError(400, f"speculative.k must be in 1..{self.max_k} (this server's --max-k) or 'auto', "
                                f"got {k}", "invalid_value", "speculative.k")

    def check_stops(self, stops: list[str]) -> None:
        if len(stops) > self.max_stops:
            raise APIError(400, f"at most {self.max_stops} stop strings, got {len(stops)}", "invalid_value", "stop")
        if any(len(s) > self.max_stop_chars for s in stops):
            raise APIError(400, f"stop strings may have at most {self.max_stop_chars} characters", "invalid_value",
                           "stop")

    def completion_tokens(self, asked: int | None, default: int, prompt_tokens: int, context: int,
                          prompt_param: str = "messages") -> int:
        """The completion length of a request: `asked` (checked against the cap and the context), else `default`
        cut to what the context leaves (near its end a tree waits: `Sequence.draft_length`)."""
        room = context - prompt_tokens
        if asked is not None:
            if asked < 1:
                raise APIError(400, f"max_tokens must be at least 1, got {asked}", "invalid_value", "max_tokens")
            if asked > self.max_tokens:
                raise APIError(400, f"max_tokens is too large: {asked}; this server allows at most "
                                    f"{self.max_tokens} completion tokens", "invalid_value", "max_tokens")
        if room < 1 or (asked is not None and asked > room):
            raise APIError(400, f"this server's context is {context} tokens; the request has {prompt_tokens} "
                                f"prompt tokens and asks for {asked or 1} completion tokens",
                           "context_length_exceeded", prompt_param)
        return asked if asked is not None else min(default, self.max_tokens, room)

    def queue_full(self) -> APIError:
        return APIError(429, f"the server is busy: {self.max_waiting} requests are already waiting; retry later",
                        "rate_limit_exceeded", kind="rate_limit_error",
                        headers={"Retry-After": str(self.retry_after_s)})


class KVBudget:
    """KV cache memory in token slots of the target's caches (`bytes_per_token` each): admitted sequences hold
    `need(capacity, ...)` slots each until they leave: their target cache's and their proposer's."""

    def __init__(self, megabytes: float, bytes_per_token: int):
        self.bytes_per_token = bytes_per_token
        self.slots = int(megabytes * 2 ** 20 // bytes_per_token)
        self.used = 0

    def need(self, capacity: int, proposer_bytes: int = 0) -> int:
        """Slots a sequence of `capacity` tokens holds: its target cache, and its proposer's caches of
        `proposer_bytes` a token (a draft model's, an EAGLE head's), counted in target slots, rounded up."""
        return -(-capacity * (self.bytes_per_token + proposer_bytes) // self.bytes_per_token)

    def fits(self, slots: int) -> bool:
        return self.used + slots <= self.slots

    def check(self, slots: int) -> None:
        """Reject a request that could never be admitted, even alone."""
        if slots > self.slots:
            need = slots * self.bytes_per_token / 2 ** 20
            raise APIError(400, f"the request needs {need:.0f} MiB of KV cache; this server's budget is "
                                f"{self.slots * self.bytes_per_token / 2 ** 20:.0f} MiB", "kv_budget_exceeded",
                           "max_tokens")
