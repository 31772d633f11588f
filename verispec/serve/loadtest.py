"""`verispec loadtest`: N concurrent clients (the official `openai` client, streaming chat completions) for a
fixed time per speculative method, against a running server (its API key from $VERISPEC_API_KEY) or a `verispec
serve` process started here on a loopback port. Reports completion tokens per second, request latency p50/p99,
time to first token and errors. `--faults` runs the fault-injection test instead (serve.faults)."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from pathlib import Path

from ..errors import VerispecError
from ..flags import method_names


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(server, port: int, decode_thread: bool = True):
    """Run `server` (verispec.serve.app.Server) with uvicorn on a background thread; return the uvicorn server
    once it accepts connections. decode_thread=False: nothing decodes until the caller runs the scheduler."""
    import uvicorn

    from .app import create_app
    from .guard import uvicorn_config
    uv = uvicorn.Server(uvicorn_config(create_app(server, decode_thread), "127.0.0.1", port))
    threading.Thread(target=uv.run, name="verispec-http", daemon=True).start()
    deadline = time.time() + 60
    while not uv.started:
        if time.time() > deadline:
            raise VerispecError("the server did not start within 60 s")
        time.sleep(0.05)
    return uv


def spawn_server(args, method: str):
    """`verispec serve` in a process of its own on a free loopback port (decoding on its main thread, as in
    production); returns (process, base URL) once it answers /health."""
    import subprocess
    import sys

    import httpx
    port = free_port()
    methods = method_names(args.methods)                         # requests ask for each: allowed, loaded at start
    cmd = [sys.executable, "-m", "verispec", "serve", "--port", str(port), "--method", method, "--max-batch",
           str(args.max_batch), "--dtype", args.dtype, "--device", args.device, "--log-level", "warning",
           "--allowed-methods", ",".join(dict.fromkeys([method, *methods]))]
    cmd += ["--model", args.model] if args.model else []
    cmd += ["--draft", args.draft] if args.draft else []
    import tempfile
    log = tempfile.TemporaryFile("w+")                  # not a pipe: a chatty server never blocks on it
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True)
    base, deadline = f"http://127.0.0.1:{port}", time.time() + 300
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            last = (log.read().strip().splitlines() or ["no message"])[-1]
            raise VerispecError(f"the server did not start: {last}")
        try:
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return proc, base + "/v1"
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise VerispecError("the server did not start within 300 s")


def api_key() -> str:
    """The key a keyed server (serve --api-key) wants: $VERISPEC_API_KEY, as `serve` reads it."""
    return os.environ.get("VERISPEC_API_KEY") or "none"


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q / 100 * (len(values) - 1))))]


async def run_clients(base_url: str, model: str, method: str, prompts: list[str], clients: int, duration: float,
                      max_tokens: int) -> dict:
    from openai import AsyncOpenAI
    client = AsyncOpenAI(base_url=base_url, api_key=api_key(), max_retries=0, timeout=600)
    latencies, ttfts, tokens, errors = [], [], [], []
    start = time.perf_counter()
    counter = iter(range(10 ** 9))

    async def worker():
        while time.perf_counter() - start < duration:
            prompt = prompts[next(counter) % len(prompts)]
            t0, first, usage = time.perf_counter(), None, None
            try:
                stream = await client.chat.completions.create(
                    model=model, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens,
                    temperature=0, stream=True, stream_options={"include_usage": True},
                    extra_body={"speculative": {"method": method}})
                async for chunk in stream:
                    if chunk.choices and chunk.choices[0].delta.content and first is None:
                        first = time.perf_counter()
                    if chunk.usage is not None:
                        usage = chunk.usage
                if usage is None:
                    raise RuntimeError("no usage in the stream")
            except Exception as e:                            # counted, never fatal
                errors.append(f"{type(e).__name__}: {e}")
                continue
            latencies.append(time.perf_counter() - t0)
            ttfts.append((first or time.perf_counter()) - t0)
            tokens.append(usage.completion_tokens)

    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - start
    await client.close()
    return {"method": method, "clients": clients, "duration_s": wall, "requests": len(latencies),
            "errors": len(errors), "error_examples": errors[:3], "completion_tokens": sum(tokens),
            "tokens_per_s": sum(tokens) / wall, "latency_p50_s": percentile(latencies, 50),
            "latency_p99_s": percentile(latencies, 99), "ttft_p50_s": percentile(ttfts, 50),
            "ttft_p99_s": percentile(ttfts, 99)}


def dev_prompts() -> list[str]:
    """The repository's development prompts (bench/dev_prompts.jsonl), wherever the command is run from."""
    path = Path(__file__).resolve().parents[2] / "bench" / "dev_prompts.jsonl"
    if not path.is_file():
        raise VerispecError(f"no development prompts at {path} (verispec installed without its repository): "
                            "pass --prompts FILE")
    return [str(path)]


def cmd_loadtest(args) -> int:
    from ..files import atomic_file
    from ..prompts import load_prompts
    args.prompts = args.prompts or dev_prompts()
    if args.clients < 1 or not 0 < args.duration <= 86400 or args.max_tokens < 1:
        raise VerispecError("--clients and --max-tokens must be >= 1 and --duration in (0, 86400] seconds")
    if args.faults:
        from .faults import cmd_faults
        return cmd_faults(args)
    methods = method_names(args.methods)
    prompts = [p.prompt for p in load_prompts(args.prompts)]
    proc = None
    from ..remote import Endpoint
    if args.url:
        base = Endpoint(args.url).base                            # http://host:port or http://host:port/v1
    else:
        proc, base = spawn_server(args, methods[0])
    try:
        model = Endpoint(base, api_key=api_key()).resolve_model()
    except VerispecError as e:
        if proc is not None:
            proc.terminate()
        raise VerispecError(f"no verispec server answers at {base}: {e}") from None
    rows = []
    try:
        for m in methods:                        # warm-up, not reported: loads each method's weights
            asyncio.run(run_clients(base, model, m, prompts, args.clients, min(3.0, args.duration),
                                    min(8, args.max_tokens)))
        print(f"{'method':>8} {'requests':>8} {'errors':>6} {'tok/s':>7} {'p50 s':>7} {'p99 s':>7} "
              f"{'TTFT p50':>8}")
        for m in methods:
            r = asyncio.run(run_clients(base, model, m, prompts, args.clients, args.duration, args.max_tokens))
            rows.append(r)
            print(f"{m:>8} {r['requests']:>8} {r['errors']:>6} {r['tokens_per_s']:>7.1f} "
                  f"{r['latency_p50_s'] or 0:>7.2f} {r['latency_p99_s'] or 0:>7.2f} {r['ttft_p50_s'] or 0:>8.2f}",
                  flush=True)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
    if args.json_out:
        with atomic_file(args.json_out) as f:
            json.dump({"clients": args.clients, "duration_s": args.duration, "max_tokens": args.max_tokens,
                       "url": args.url or "loopback (started here)", "rows": rows}, f, indent=1)
    return 1 if any(r["errors"] for r in rows) else 0


