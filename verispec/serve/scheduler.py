"""The decoding thread: it owns the model and the batch; requests join between steps (continuous batching).

The HTTP side builds a `Job` (a checked `Sequence` plus where to send its tokens) and submits it. Each loop the
thread admits waiting jobs while the batch has room (prefilling each alone), runs one batch step, and sends every
sequence's new tokens back to its request's event loop. A job marked cancelled (its client went away, or a stop
string matched) leaves the batch at the next step and frees its slot.

All PyTorch work of a server happens on this one thread, loading weights included (`call`). PyTorch's CPU
kernels run on OpenMP, and OpenMP keeps a team of worker threads for every thread that ever ran a parallel
region. While such a thread lives, there are more worker threads than cores, and OpenMP stops letting idle
workers spin between regions: every one of the thousands of small parallel regions of a decoding step then waits
for a sleeping worker to wake. Measured here: a draft model loaded once on a live HTTP thread cut plain decoding
from 96 to 60 tok/s in the same server (8 clients), and 27 to 17 tok/s in a single-sequence loop.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..engine import Sequence
from .batch import Batch
from .metrics import Metrics


@dataclass
class Job:
    method: str
    loop: asyncio.AbstractEventLoop
    pinned: bool = False                   # a seeded sampled request: its k schedule ignores the batch size
    sequence: Sequence | None = None
    events: asyncio.Queue = field(default_factory=asyncio.Queue)   # ("tokens", ids) ... then ("done", ...)
    arrived: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    last_token_at: float | None = None
    tokens: int = 0
    cancelled: str | None = None           # why the request side stopped it: "disconnected" or "stop"
    stats: object = None                   # the sequence's GenerationStats, once done

    def on_tokens(self, ids: list[int]) -> None:      # called on the decoding thread
        now = time.perf_counter()
        self.first_token_at = self.first_token_at or now
        self.last_token_at, self.tokens = now, self.tokens + len(ids)
        self._send(("tokens", list(ids)))

    def cancel(self, why: str) -> None:               # called on the request side
        self.cancelled = self.cancelled or why

    def _send(self, event: tuple) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:                          # the request's loop is gone (server shutting down)
            pass


@dataclass
class Call:
    fn: Callable[[], Any]
    result: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)


class Scheduler:
    def __init__(self, batch: Batch, metrics: Metrics, max_batch: int = 16):
        self.batch, self.metrics, self.max_batch = batch, metrics, max_batch
        self.inbox: queue.Queue[Job | Call | None] = queue.Queue()
        self.decoder: threading.Thread | None = None    # the thread decoding, once it runs
        self.waiting: collections.deque[Job] = collections.deque()
        self.jobs: dict[int, Job] = {}               # id(sequence) -> its job, for sequences in the batch
        self._stopping, self._finished = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, name="verispec-decoder", daemon=True)

    def start(self) -> None:
        """Decode on a thread of its own (tests, embedding). `verispec serve` calls `run` on the main thread
        instead, the thread that loaded the model: see the module's note on OpenMP."""
        self.thread.start()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the decoding thread, between two steps, and return its result (or raise its error).
        For PyTorch work requested from another thread, such as loading a proposer's weights."""
        if self.decoder is None or threading.current_thread() is self.decoder:
            return fn()
        if self._stopping.is_set():
            raise RuntimeError("the server is stopping")
        call = Call(fn)
        self.inbox.put(call)
        while True:
            try:
                return call.result.result(timeout=0.5)
            except concurrent.futures.TimeoutError:
                if self._finished.is_set():
                    raise RuntimeError("the server stopped") from None

    def run(self) -> None:
        """Decode on the calling thread until `stop`."""
        self._run()

    def stop(self) -> None:
        self._stopping.set()
        self.inbox.put(None)
        if self.thread.is_alive():
            self.thread.join(timeout=30)

    def submit(self, job: Job) -> None:
        self.metrics.waiting.inc()
        self.inbox.put(job)

    def _run(self) -> None:
        self.decoder = threading.current_thread()
        while not self._stopping.is_set():
            self._take_new(block=not self.batch.running and not self.waiting)
            self._admit()
            for seq in self.batch.running:
                if self.jobs[id(seq)].cancelled:
                    seq.cancel()
            self.metrics.running.set(len(self.batch))
            if not self.batch.running:
                continue
            self.metrics.batch_size.observe(len(self.batch))
            try:
                finished = self.batch.step()
            except Exception as e:                   # keep serving: fail this batch's requests, not the server
                for seq in self.batch.abandon():
                    self.jobs.pop(id(seq))._send(("error", f"decoding failed: {e}"))
                continue
            for seq in finished:
                self._finish(self.jobs.pop(id(seq)))
        self._finished.set()

    def _take_new(self, block: bool) -> None:
        try:
            job = self.inbox.get(timeout=0.5) if block else self.inbox.get_nowait()
            while True:
                if isinstance(job, Call):
                    try:
                        job.result.set_result(job.fn())
                    except Exception as e:
                        job.result.set_exception(e)
                elif job is not None:
                    self.waiting.append(job)
                job = self.inbox.get_nowait()
        except queue.Empty:
            pass

    def _admit(self) -> None:
        while self.waiting and len(self.batch) < self.max_batch:
            job = self.waiting.popleft()
            self.metrics.waiting.dec()
            if job.cancelled:
                self.metrics.rejected("cancelled before start")
                continue
            try:
                self.batch.add(job.sequence, job.pinned)
            except Exception as e:
                job._send(("error", f"prefill failed: {e}"))
                continue
            if job.sequence.done:                    # finished at its first token
                self._finish(job)
            else:
                self.jobs[id(job.sequence)] = job

    def _finish(self, job: Job) -> None:
        seq = job.sequence
        g = seq.result()
        outcome = job.cancelled or g.finish_reason
        self.metrics.finished(job.method, outcome, g.stats)
        if job.first_token_at is not None:
            self.metrics.ttft.observe(job.first_token_at - job.arrived)
            self.metrics.latency.observe(job.last_token_at - job.arrived)
            if job.tokens > 1:
                self.metrics.tpot.observe((job.last_token_at - job.first_token_at) / (job.tokens - 1))
        job._send(("done", g.finish_reason, g.stats))
