"""The decoding thread: it owns the model and the batch; requests join between steps (continuous batching).

The HTTP side builds a `Job` (a checked `Sequence` plus where to send its tokens) and submits it; past
`max_waiting` jobs not yet decoding, `submit` refuses (the HTTP side answers 429). Each loop the thread admits
waiting jobs, first come first served, while the batch has a slot and the KV budget has room for the cache the
job needs; prefills (one chunk of at most `prefill_chunk` prompt tokens per loop, or whole prompts when 0); runs
one batch step; and sends every sequence's new tokens back to its request's event loop. A job marked cancelled
(its client went away, or a stop string matched) leaves the queue or the batch at the next loop and frees its
slot and its cache.

Failures stay with their job: a sequence whose prefill, plan or acceptance raises gets an error event and
leaves; the others go on (serve.batch). If the loop itself dies, every job gets an error event, `alive` turns
false (/health answers 503) and `submit` refuses new jobs.

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

import torch

from ..engine import Sequence
from .batch import Batch
from .limits import KVBudget
from .metrics import Metrics
from .prefill import Prefill
from .prefix import PrefixCache


PASSED_OVER = 4       # chunked prefill: loops a prompt may wait behind shorter ones before it goes first


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
    prefill: Prefill | None = None         # its prompt's prefill, from admission
    kv_need: int = 0                       # KV budget it needs (`KVBudget.need`; 0: its capacity)
    kv_slots: int = 0                      # KV budget it holds (token slots), from admission until it leaves
    passed_over: int = 0                   # loops in a row its prefill got no prompt tokens (chunked prefill)
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


class Refused(Exception):
    """`submit` refused a job: the queue is full (`full`) or the decoding loop is dead."""

    def __init__(self, message: str, full: bool):
        super().__init__(message)
        self.full = full


class Scheduler:
    def __init__(self, batch: Batch, metrics: Metrics, max_batch: int = 16, kv: KVBudget | None = None,
                 max_waiting: int = 1 << 30, prefill_chunk: int = 0, prefix: PrefixCache | None = None):
        self.batch, self.metrics, self.max_batch, self.kv = batch, metrics, max_batch, kv
        self.max_waiting, self.prefill_chunk, self.prefix = max_waiting, prefill_chunk, prefix
        self.inbox: queue.Queue[Job | Call | None] = queue.Queue()
        self.decoder: threading.Thread | None = None    # the thread decoding, once it runs
        self.waiting: collections.deque[Job] = collections.deque()
        self.prefilling: list[Job] = []              # admitted (slot and cache taken), prompt not all prefilled
        self.jobs: dict[int, Job] = {}               # id(sequence) -> its job, for sequences in the batch
        self.pending, self._pending_lock = 0, threading.Lock()    # submitted, not yet admitted (or dropped)
        self.dead: str | None = None                 # why the decoding loop died
        self._stopping, self._finished = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, name="verispec-decoder", daemon=True)

    @property
    def alive(self) -> bool:
        return self.dead is None and not self._finished.is_set()

    def start(self) -> None:
        """Decode on a thread of its own (tests, embedding). `verispec serve` calls `run` on the main thread
        instead, the thread that loaded the model: see the module's note on OpenMP."""
        self.thread.start()

    def call(self, fn: Callable[[], Any]) -> Any:
        """Run fn on the decoding thread, between two steps, and return its result (or raise its error).
        For PyTorch work requested from another thread, such as loading a proposer's weights."""
        if self.decoder is None or threading.current_thread() is self.decoder:
            return fn()
        if self._stopping.is_set() or not self.alive:
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
        """Decode on the calling thread until `stop` (or until the loop dies: see `dead`)."""
        self._run()

    def stop(self) -> None:
        self._stopping.set()
        self.inbox.put(None)
        if self.thread.is_alive():
            self.thread.join(timeout=30)

    def submit(self, job: Job) -> None:
        with self._pending_lock:                     # (the loop dies under it too: no job slips in after)
            if not self.alive:
                raise Refused(f"the decoding loop is not running ({self.dead or 'stopped'})", full=False)
            if self.pending >= self.max_waiting:
                raise Refused("the waiting queue is full", full=True)
            self.pending += 1
            self.inbox.put(job)
        self.metrics.waiting.inc()

    def _run(self) -> None:
        self.decoder = threading.current_thread()
        try:
            while not self._stopping.is_set():
                self._loop()
        except BaseException as e:                   # a bug of the loop itself: fail every job, refuse new ones
            with self._pending_lock:
                self.dead = f"{type(e).__name__}: {e}"
            queued = []                              # submitted, not yet taken from the inbox
            while not self.inbox.empty():
                item = self.inbox.get_nowait()
                if isinstance(item, Call):
                    item.result.set_exception(RuntimeError(f"the decoding loop died: {self.dead}"))
                elif item is not None:
                    queued.append(item)
            for job in [*self.jobs.values(), *self.prefilling, *self.waiting, *queued]:
                job._send(("error", f"the decoding loop died: {self.dead}"))
            self.jobs, self.prefilling, self.batch.running = {}, [], []
            self._drop_waiting([*self.waiting, *queued])
            if not isinstance(e, Exception):
                raise
        finally:
            self._finished.set()

    def _loop(self) -> None:
        self._take_new(block=not self.batch.running and not self.waiting and not self.prefilling)
        self._admit()
        self._prefill()
        for seq in self.batch.running:
            if self.jobs[id(seq)].cancelled:
                seq.cancel()
        self.metrics.running.set(len(self.batch))
        if not self.batch.running:
            return
        self.metrics.batch_size.observe(len(self.batch))
        try:
            finished = self.batch.step()
        except Exception as e:                       # outside any one sequence's work: fail this batch's jobs
            finished = []
            for seq in self.batch.abandon():         # (sequences cancelled before the failure among them)
                self._fail(self.jobs.pop(id(seq)), f"decoding failed: {type(e).__name__}: {e}")
        for seq, error in self.batch.take_failed():  # failed on their own this step (whether or not it then failed)
            self._fail(self.jobs.pop(id(seq)), f"decoding failed: {type(error).__name__}: {error}")
        for seq in finished:
            self._finish(self.jobs.pop(id(seq)))

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

    def _drop_waiting(self, jobs: list[Job]) -> None:
        with self._pending_lock:
            self.pending -= len(jobs)
        self.metrics.waiting.dec(len(jobs))

    def _admit(self) -> None:
        gone = [job for job in self.waiting if job.cancelled]
        if gone:                                     # cancelled while waiting: never started
            self.waiting = collections.deque(job for job in self.waiting if not job.cancelled)
            self._drop_waiting(gone)
            for job in gone:
                self.metrics.rejected("cancelled before start")
                job._send(("done", "cancelled", None))
        while self.waiting and len(self.batch) + len(self.prefilling) < self.max_batch:
            job = self.waiting[0]
            if self.kv is not None:
                need = job.kv_need or job.sequence.capacity
                if not self.kv.fits(need):
                    break                            # first come, first served: wait for cache to free up
                job.kv_slots = need
                self.kv.used += job.kv_slots
            self.waiting.popleft()
            self._drop_waiting([job])
            job.prefill = self._start_prefill(job.sequence)
            self.prefilling.append(job)

    def _start_prefill(self, seq: Sequence) -> Prefill:
        """A joining prompt's prefill, from the longest prefix it shares with a kept prompt (serve.prefix)."""
        keep = self.prefix is not None and self.prefix.keeps(seq.prompt)
        prefill = Prefill(seq, keep_features=keep)
        hit = None if self.prefix is None else self.prefix.match(seq.prompt)
        if hit is not None:
            entry, n = hit
            try:
                prefill.reuse(*entry.prefix(n))
            except (RuntimeError, ValueError):      # no memory for its cache now: prefill it all, as without one
                return Prefill(seq, keep_features=True)
            self.metrics.prefix_hits.inc()
            self.metrics.prefix_tokens.inc(n)
        return prefill

    def _keep_prefix(self, job: Job) -> None:
        """Keep a prompt just prefilled for the prompts that will share its prefix (serve.prefix)."""
        if self.prefix is not None:
            self._keep(job.sequence.prompt, job.sequence, job.prefill.prompt_features)

    def _keep(self, tokens: list[int], seq: Sequence, features: Callable[[], torch.Tensor | None]) -> None:
        """Keep `tokens`, cached in `seq`'s first slots, with their hidden states [len(tokens), D] (`features()`:
        gathered here, where running out of memory costs the entry, never the request or the loop)."""
        try:
            kept = features()
            if kept is not None:
                self.prefix.keep(tokens, seq.cache, kept)
        except RuntimeError:                        # no memory for a copy now: the request goes on without one
            pass
        self.metrics.prefix_bytes.set(self.prefix.nbytes)

    def _prefill(self) -> None:
        """Prefill joining jobs: whole prompts when prefill_chunk is 0, else at most prefill_chunk prompt tokens
        this loop, the least remaining first (a job whose prompt is done joins the batch)."""
        budget = self.prefill_chunk
        if budget:      # shortest first: a long prompt never holds up short ones; but one passed over more than
            for job in self.prefilling:              # PASSED_OVER loops in a row goes first (the longest passed over
                job.passed_over += 1                 # first), so short ones cannot starve it
            self.prefilling.sort(key=lambda job: (-job.passed_over if job.passed_over > PASSED_OVER else 0,
                                                  job.prefill.remaining))
        while self.prefilling and (budget > 0 or not self.prefill_chunk):
            job = self.prefilling[0]
            if job.cancelled:
                self.prefilling.pop(0)
                self._finish(job)
                continue
            try:
                budget -= job.prefill.advance(budget)
                job.passed_over = 0
                if job.prefill.remaining:
                    return
                self._keep_prefix(job)
            except Exception as e:
                self.prefilling.pop(0)
                self._fail(job, f"prefill failed: {type(e).__name__}: {e}")
                continue
            self.prefilling.pop(0)
            self.batch.join(job.sequence, job.pinned)
            if job.sequence.done:                    # finished at its first token
                self._finish(job)
            else:
                self.jobs[id(job.sequence)] = job

    def _release(self, job: Job) -> None:
        if self.kv is not None:
            self.kv.used -= job.kv_slots
        job.kv_slots, job.prefill = 0, None       # the Prefill holds the cache of an unfinished prefill

    def _fail(self, job: Job, message: str) -> None:
        self._release(job)
        job.sequence.features = None
        self.metrics.requests.labels(job.method, "error").inc()
        job._send(("error", message))

    def _finish(self, job: Job) -> None:
        self._release(job)
        seq = job.sequence
        if self.prefix is not None and seq.features is not None and seq.cache is not None:
            # a chat's next turn holds this one's answer: keep the prompt and the answer as one entry
            self._keep(seq.cached_tokens, seq, lambda: torch.cat(seq.features))
        seq.features = None
        g = seq.result()
        outcome = job.cancelled or g.finish_reason
        self.metrics.finished(job.method, outcome, g.stats)
        if job.first_token_at is not None:
            self.metrics.ttft.observe(job.first_token_at - job.arrived)
            self.metrics.latency.observe(job.last_token_at - job.arrived)
            if job.tokens > 1:
                self.metrics.tpot.observe((job.last_token_at - job.first_token_at) / (job.tokens - 1))
        job._send(("done", g.finish_reason, g.stats))
