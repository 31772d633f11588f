"""`verispec loadtest --faults`: a fault-injection load test of a server in this process, on 127.0.0.1 only.

The server runs as `verispec serve` runs it (decoding on the main thread, HTTP on another); the clients run on a
third thread. First each well-formed request of a fixed pool (greedy and seeded sampled, over a few prompts, and
one long prompt) is sent alone, one after the other, recording the output each request gets alone; then one
round of C requests at once. That is the warm-up. Then C clients send requests for the given time, and on until
every kind of fault has been sent at least once (at most ten times the given time: a slow machine still
exercises them all); every `fault_every`-th request is a fault, in turn:
  malformed JSON, an oversize body, an unknown method, a huge max_tokens (each must get its 4xx);
  a client leaving before its first token, one leaving mid-stream, one leaving right after a stop string;
  a planted failure (a test-only hook of the batch makes one sequence raise after two tokens: it must get its
  500 or stream error event, alone).
The load runs in two rounds of half the time each; during the second half of each, one client sends long prompts.
At the end it checks that every well-formed request got exactly its alone-output (none lost, none changed), that
/health is ok and the decoding loop alive, that the departed clients left no job behind (nothing running, waiting
or holding KV cache once the last client is done), and that the second round left no more live tensors than the
first (the bytes of every tensor storage Python can reach, less the model's parameters and the prefix cache's
entries, which it holds by design up to its budget; within 8 MiB). It reports the resident memory too, read the
same way after freed heap goes back to the system; allocator caches move that by tens of percent between runs
(session 58), so it is reported, not judged. It reports p50/p99 time to first token and time per output token of
the short streaming requests, without and with long-prompt arrivals."""
from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
import time

from ..errors import VerispecError
from ..flags import method_names
from .loadtest import free_port, percentile, start_server

FAULTS = ("malformed_json", "oversize_body", "unknown_method", "huge_max_tokens", "leave_before_first_token",
          "leave_mid_stream", "leave_after_stop", "planted_failure")
PLANTED = "Planted fault: this request fails on the server after two tokens."


def settled_mb(server) -> float:
    """Resident memory (MiB) once freed heap pages go back to the system (glibc's malloc_trim, where there is one),
    less what the server's prefix cache holds by design (up to its budget)."""
    try:
        import ctypes
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass
    prefix = server.scheduler.prefix
    return rss_mb() - (prefix.nbytes / 2 ** 20 if prefix is not None else 0.0)


def live_mb(server) -> float:
    """MiB of live tensor storage Python can reach (each storage once), less the model's parameters and buffers and
    the prefix cache's entries: what requests left behind, if anything, plus the server's fixed state (the same in
    both rounds: laid-out or packed weights, such as gguf's, which are not parameters; tables; a draft model)."""
    import torch
    gc.collect()

    def storage(t):                                      # ((device, address), bytes); None where it has no plain one
        try:
            s = t.untyped_storage()
            return (t.device, s.data_ptr()), s.nbytes()
        except (RuntimeError, NotImplementedError):      # wrapper subclasses (e.g. DTensor) have none of their own
            return None

    model = server.target.model
    fixed = {found[0] for found in map(storage, (*model.parameters(), *model.buffers())) if found is not None}
    sizes: dict = {}                                     # each storage once
    for o in gc.get_objects():
        if issubclass(type(o), torch.Tensor) and not o.is_meta and o.layout == torch.strided:  # (no __class__ lookup)
            found = storage(o)
            if found is not None and found[0][1] and found[0] not in fixed:
                sizes[found[0]] = found[1]
    total = sum(sizes.values())
    prefix = server.scheduler.prefix
    return (total - (prefix.nbytes if prefix is not None else 0)) / 2 ** 20


LIVE_SLACK_MB = 8.0      # a second round may hold a few more small tensors (a longer scratch); a leak grows by requests


def rss_mb() -> float:
    with open("/proc/self/statm") as f:                 # Linux: resident pages are the second field
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def pool(prompts: list[str], long_prompt: str, max_tokens: int) -> list[dict]:
    """The well-formed requests: greedy and seeded sampled chat requests over the prompts, and the long prompt."""
    reqs = []
    for i, p in enumerate(prompts):
        sampling = {"temperature": 0} if i % 2 == 0 else {"temperature": 0.8, "seed": 1000 + i}
        reqs.append({"messages": [{"role": "user", "content": p}], "max_tokens": max_tokens, **sampling})
    if long_prompt:
        reqs.append({"prompt": long_prompt, "max_tokens": max(4, max_tokens // 4), "temperature": 0, "long": True})
    return reqs


class Run:
    """The client side: sends requests, records outcomes and timings."""

    def __init__(self, base: str, model: str, reqs: list[dict], max_body: int):
        self.base, self.model, self.reqs, self.max_body = base, model, reqs, max_body
        self.alone: dict[int, str] = {}
        self.got: list[tuple[int, str | None, str]] = []      # (request index, text or None if lost, detail)
        self.faults: dict[str, list[bool]] = {f: [] for f in FAULTS}   # did each fault get the answer it should
        self.timings: dict[bool, list[tuple[float, float | None]]] = {False: [], True: []}   # long phase -> ...
        self.long_phase = False

    def payload(self, i: int, stream: bool) -> tuple[str, dict]:
        r = dict(self.reqs[i])
        path = "/v1/completions" if "prompt" in r else "/v1/chat/completions"
        r.pop("long", None)
        return path, {**r, "model": self.model, "stream": stream}

    async def send(self, client, i: int, stream: bool) -> tuple[str | None, str, float | None, float | None]:
        """(text, detail, ttft, tpot) of well-formed request i; text None if it failed."""
        path, body = self.payload(i, stream)
        t0 = time.perf_counter()
        if not stream:
            r = await client.post(self.base + path, json=body)
            if r.status_code != 200:
                return None, f"HTTP {r.status_code}: {r.text[:200]}", None, None
            c = r.json()["choices"][0]
            return (c["message"]["content"] if "message" in c else c["text"]), "ok", None, None
        parts, times, finish = [], [], None
        async with client.stream("POST", self.base + path, json=body) as r:
            if r.status_code != 200:
                return None, f"HTTP {r.status_code}", None, None
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if "error" in event:
                    return None, f"stream error: {event['error']['message']}", None, None
                c = event["choices"][0]
                piece = c["delta"].get("content") if "delta" in c else c["text"]
                if piece:
                    parts.append(piece)
                    times.append(time.perf_counter())
                finish = c.get("finish_reason") or finish
        if finish is None:
            return None, "the stream ended without a finish reason", None, None
        ttft = times[0] - t0 if times else None
        tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
        return "".join(parts), "ok", ttft, tpot

    async def fault(self, client, kind: str, n: int) -> bool:
        """Send fault `kind`; True if the server answered it as it should."""
        short = [i for i, r in enumerate(self.reqs) if not r.get("long")]
        path, body = self.payload(short[n % len(short)], stream=True)
        if kind == "malformed_json":
            r = await client.post(self.base + path, content=b'{"model": "x", "messages": [',
                                  headers={"content-type": "application/json"})
            return r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        if kind == "oversize_body":
            r = await client.post(self.base + path, content=b"x" * (self.max_body + 1))
            return r.status_code == 413
        if kind == "unknown_method":
            r = await client.post(self.base + path, json={**body, "speculative": {"method": "telepathy"}})
            return r.status_code == 400 and r.json()["error"]["code"] == "invalid_method"
        if kind == "huge_max_tokens":
            r = await client.post(self.base + path, json={**body, "max_tokens": 10 ** 9})
            return r.status_code == 400
        if kind == "planted_failure":
            r = await client.post(self.base + "/v1/completions", json={"model": self.model, "prompt": PLANTED,
                                                                        "max_tokens": 16, "temperature": 0})
            return r.status_code == 500 and "planted" in r.json()["error"]["message"]
        stop = None
        if kind == "leave_after_stop":
            words = self.alone[short[n % len(short)]].split()
            stop = words[min(2, len(words) - 1)] if words else None
            body = {**body, "stop": stop} if stop else body
        async with client.stream("POST", self.base + path, json=body) as r:
            if kind == "leave_before_first_token":
                return r.status_code == 200
            pieces = 0
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                c = json.loads(line[6:])["choices"][0]
                pieces += bool(c["delta"].get("content") if "delta" in c else c["text"])
                if (kind == "leave_mid_stream" and pieces >= 2) or c.get("finish_reason"):
                    return r.status_code == 200               # hang up here, without reading on
        return r.status_code == 200

    async def warm_up(self, clients: int) -> None:
        """Each request of the pool alone, one after the other (their alone-outputs), then one round of `clients`
        at once (so the memory after warm-up is that of a full batch)."""
        import httpx
        async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=4 * clients)) as client:
            for i in range(len(self.reqs)):
                text, detail, *_ = await self.send(client, i, stream=False)
                if text is None:
                    raise VerispecError(f"warm-up request {i} failed: {detail}")
                self.alone[i] = text
            together = await asyncio.gather(*(self.send(client, w % len(self.reqs), stream=False)
                                              for w in range(clients)))
            if any(text != self.alone[w % len(self.reqs)] for w, (text, *_) in enumerate(together)):
                raise VerispecError("warm-up: a request decoded with others differs from its alone-output")

    async def load(self, clients: int, duration: float, fault_every: int) -> None:
        import httpx
        start = time.perf_counter()
        counter = iter(range(10 ** 9))
        short = [i for i, r in enumerate(self.reqs) if not r.get("long")]
        long_ = [i for i, r in enumerate(self.reqs) if r.get("long")]

        def busy() -> bool:             # the duration, then on until every fault kind was sent once (10x at most)
            elapsed = time.perf_counter() - start
            return elapsed < duration or (elapsed < 10 * duration and not all(self.faults[k] for k in FAULTS))

        async def worker(w: int, client):
            while busy():
                self.long_phase = time.perf_counter() - start >= duration / 2
                if w == 0 and self.long_phase and long_:
                    i, stream = long_[0], False                   # one client sends long prompts, second half
                else:
                    n = next(counter)
                    if n % fault_every == fault_every - 1:
                        kind = FAULTS[(n // fault_every) % len(FAULTS)]
                        try:
                            self.faults[kind].append(await self.fault(client, kind, n))
                        except Exception as e:
                            self.faults[kind].append(False)
                            self.got.append((-1, None, f"fault {kind}: {type(e).__name__}: {e}"))
                        continue
                    i, stream = short[n % len(short)], n % 3 != 0
                phase = self.long_phase
                try:
                    text, detail, ttft, tpot = await self.send(client, i, stream)
                except Exception as e:
                    text, detail, ttft, tpot = None, f"{type(e).__name__}: {e}", None, None
                self.got.append((i, text, detail))
                if stream and ttft is not None and not self.reqs[i].get("long"):
                    self.timings[phase].append((ttft, tpot))

        limits = httpx.Limits(max_connections=4 * clients)
        async with httpx.AsyncClient(timeout=600, limits=limits) as client:
            await asyncio.gather(*(worker(w, client) for w in range(clients)))

    def report(self, memory: dict, healthy: bool, alive: bool) -> dict:
        lost = [d for i, t, d in self.got if t is None]
        changed = [i for i, t, d in self.got if t is not None and t != self.alone[i]]

        def stats(phase):
            ttft = [a for a, _ in self.timings[phase]]
            tpot = [b for _, b in self.timings[phase] if b is not None]
            return {"streams": len(ttft), "ttft_p50_s": percentile(ttft, 50), "ttft_p99_s": percentile(ttft, 99),
                    "tpot_p50_s": percentile(tpot, 50), "tpot_p99_s": percentile(tpot, 99)}

        return {"well_formed": len(self.got), "lost": len(lost), "lost_examples": lost[:3], "changed": len(changed),
                "faults": {k: {"sent": len(v), "answered_right": sum(v)} for k, v in self.faults.items()},
                "healthy_at_end": healthy, "decoding_loop_alive": alive, **memory,
                "live_growth_mb": memory["live_end_mb"] - memory["live_after_round_1_mb"],
                "rss_growth": memory["rss_end_mb"] / memory["rss_after_round_1_mb"] - 1,
                "without_long_prompts": stats(False), "with_long_prompts": stats(True)}


def run_faults(server, prompts: list[str], clients: int, duration: float, max_tokens: int, long_tokens: int,
               fault_every: int = 5) -> dict:
    """Run the fault-injection load test against `server` (verispec.serve.app.Server, not yet serving); decodes on
    the calling thread. Returns the report (see Run.report)."""
    import httpx
    tok = server.target.tokenizer
    marker = tok.encode(PLANTED)

    def planted(seq):                                   # the test-only hook: one kind of sequence fails
        if seq.prompt == marker and len(seq.out) >= 2:
            raise RuntimeError("planted fault")

    server.scheduler.batch.fault = planted
    words = " ".join(prompts).split()
    long_prompt, n = [], 0
    while n < long_tokens:
        long_prompt.append(words[len(long_prompt) % len(words)])
        n = len(tok.encode(" ".join(long_prompt))) if len(long_prompt) % 64 == 0 else n
    port = free_port()
    uv = start_server(server, port, decode_thread=False)
    base = f"http://127.0.0.1:{port}"
    run = Run(base, server.name, pool(prompts, " ".join(long_prompt), max_tokens), server.limits.max_body_bytes)
    out: dict = {}
    sched = server.scheduler

    def working() -> bool:                               # anything running, waiting or holding KV cache
        return bool(len(sched.batch) or sched.pending or sched.prefilling or server.kv.used)

    def settle() -> None:
        deadline = time.time() + 10
        while working() and time.time() < deadline:
            time.sleep(0.1)                              # the decoding loop drops the last departed clients

    def clients_side():
        try:
            asyncio.run(run.warm_up(clients))
            asyncio.run(run.load(clients, duration / 2, fault_every))     # round 1: the working set
            settle()
            idle_after_round_1 = not working()           # (else round 1's census counts requests still running)
            memory = {"live_after_round_1_mb": live_mb(server), "rss_after_round_1_mb": settled_mb(server)}
            asyncio.run(run.load(clients, duration / 2, fault_every))     # round 2: a leak grows it again
            settle()
            healthy = httpx.get(base + "/health", timeout=30).status_code == 200
            memory.update(live_end_mb=live_mb(server), rss_end_mb=settled_mb(server))
            out["report"] = run.report(memory, healthy, sched.alive)
            out["report"]["idle_at_end"] = not working()
            out["report"]["idle_after_round_1"] = idle_after_round_1
        except BaseException as e:
            out["error"] = e
        finally:
            server.scheduler.stop()

    side = threading.Thread(target=clients_side, name="verispec-loadtest-clients", daemon=True)
    side.start()
    try:
        server.scheduler.run()                           # decoding on this thread, as `verispec serve` does
    finally:
        uv.should_exit = True
        side.join(timeout=60)
    if "error" in out:
        raise VerispecError(f"the fault test could not run: {out['error']}")
    return out["report"]


def passed(report: dict, slack_mb: float = LIVE_SLACK_MB) -> bool:
    return (report["lost"] == 0 and report["changed"] == 0 and report["healthy_at_end"] and report["idle_at_end"]
            and report["idle_after_round_1"]
            and report["decoding_loop_alive"] and report["live_growth_mb"] <= slack_mb
            and all(f["sent"] == f["answered_right"] for f in report["faults"].values()))


def ms(seconds: float | None) -> str:
    return f"{1000 * seconds:.0f} ms" if seconds is not None else "-"


def cmd_faults(args) -> int:
    from ..api import Target
    from ..files import atomic_file
    from ..prompts import load_prompts
    from .app import Server
    if args.url:
        raise VerispecError("--faults runs its own server (it plants a failure through a test-only hook); drop --url")
    if args.fault_every < 2 or args.long_prompt < 0 or args.prefill_chunk < 0:
        raise VerispecError("--fault-every must be >= 2, --long-prompt and --prefill-chunk >= 0")
    methods = method_names(args.methods)
    prompts = [p.prompt for p in load_prompts(args.prompts)][:6]
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
    server = Server(target, methods[0], max_batch=args.max_batch, draft=args.draft,
                    allowed_methods=list(dict.fromkeys(methods + ["plain"])), prefill_chunk=args.prefill_chunk)
    print(f"fault test: {args.clients} clients for {args.duration:g} s, a fault in every {args.fault_every}th "
          f"request, long prompts of {args.long_prompt} tokens in the second half, prefill chunk "
          f"{args.prefill_chunk or 'off'}", flush=True)
    r = run_faults(server, prompts, args.clients, args.duration, args.max_tokens, args.long_prompt,
                   args.fault_every)
    print(f"well-formed requests {r['well_formed']}: lost {r['lost']}, changed {r['changed']}; healthy at end "
          f"{r['healthy_at_end']}, idle after round 1 {r['idle_after_round_1']} and at the end {r['idle_at_end']}")
    print(f"  live tensors (less parameters and the prefix cache; fixed state included) after round 1 "
          f"{r['live_after_round_1_mb']:.1f} -> after round 2 {r['live_end_mb']:.1f} MiB "
          f"({r['live_growth_mb']:+.1f}; at most +{LIVE_SLACK_MB:g}); "
          f"resident memory, reported only: {r['rss_after_round_1_mb']:.0f} -> {r['rss_end_mb']:.0f} MiB "
          f"({100 * r['rss_growth']:+.1f}%)")
    for kind, f in r["faults"].items():
        print(f"  {kind:<26} sent {f['sent']:>3}, answered right {f['answered_right']:>3}")
    for phase in ("without_long_prompts", "with_long_prompts"):
        s = r[phase]
        print(f"  {phase.replace('_', ' '):<22} streams {s['streams']:>4}  TTFT p50 {ms(s['ttft_p50_s'])}, p99 "
              f"{ms(s['ttft_p99_s'])}  TPOT p50 {ms(s['tpot_p50_s'])}, p99 {ms(s['tpot_p99_s'])}")
    for example in r["lost_examples"]:
        print(f"  lost: {example}")
    ok = passed(r)
    print("PASS" if ok else "FAIL", flush=True)
    if args.json_out:
        with atomic_file(args.json_out) as f:
            json.dump({"clients": args.clients, "duration_s": args.duration, "max_tokens": args.max_tokens,
                       "fault_every": args.fault_every, "long_prompt_tokens": args.long_prompt,
                       "prefill_chunk": args.prefill_chunk, "dtype": args.dtype, **r}, f, indent=1)
    return 0 if ok else 1
