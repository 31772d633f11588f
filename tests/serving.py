"""Helpers of the serving tests: a server on a loopback port for the length of a `with` block, on a tiny model."""
from __future__ import annotations

import contextlib

import httpx

from verispec.api import make_engine
from verispec.engine import GenerationConfig
from verispec.sampling import SamplingConfig
from verispec.serve.loadtest import free_port, start_server


@contextlib.contextmanager
def serving(server, decode_thread: bool = True):
    """Yields the base URL (http://127.0.0.1:PORT) of `server`, running until the block ends."""
    port = free_port()
    uv = start_server(server, port, decode_thread)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True


def post(base: str, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(base + path, json=body, timeout=kw.pop("timeout", 60), **kw)


def offline_ids(target, ids: list[int], max_new: int, method: str = "plain", temperature: float = 0.0,
                seed: int = 0) -> str:
    """What `verispec generate` gives for these prompt ids, as text."""
    return target.tokenizer.decode(offline_cached(target, ids, max_new, method, temperature, seed)[0])


def offline_cached(target, ids: list[int], max_new: int, method: str = "plain", temperature: float = 0.0,
                   seed: int = 0) -> tuple[list[int], list[int]]:
    """The token ids `verispec generate` gives, and the tokens whose keys and values its cache holds after."""
    cfg = GenerationConfig(max_new_tokens=max_new, k="auto", seed=seed, sampling=SamplingConfig(temperature),
                           stop_token_ids=target.tokenizer.stop_token_ids)
    engine = make_engine(method, target)
    return engine.generate(ids, cfg).token_ids, engine.cached_tokens


def metric(base: str, name: str, labels: str = "") -> float:
    for line in httpx.get(base + "/metrics").text.splitlines():
        if line.startswith(name + labels + " "):
            return float(line.split()[-1])
    return 0.0
