"""One request's answer: its jobs' tokens as text (stop strings applied), as one JSON body or as server-sent
events. Each of n choices of each prompt is a job (all decode side by side): choice i * n + j is prompt i's
j-th, sampled with the request's seed + j. A stream has one prompt and one choice."""
from __future__ import annotations

import asyncio
import json
import time
import uuid

from fastapi import Request
from fastapi.responses import StreamingResponse

from .errors import APIError, server_error
from .protocol import Common
from .scheduler import Job
from .text import TextStream


async def events(job: Job, text: TextStream):
    """(text piece, finish reason or None), until the job is done; cancels the job if abandoned."""
    try:
        while True:
            kind, *rest = await job.events.get()
            if kind == "error":
                raise server_error(rest[0])
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


async def collect(job: Job, text: TextStream) -> tuple[str, str | None]:
    parts, finish = [], None
    async for piece, finish in events(job, text):
        parts.append(piece)
    return "".join(parts), finish


async def respond(server, req: Common, request: Request, prompts: list[list[int]], default_max: int, chat: bool):
    jobs = [server.job(req, ids, default_max, j) for ids in prompts    # every choice checked before any decodes
            for j in range(req.n)]
    submitted = []
    try:
        for job in jobs:
            server.submit(job)
            submitted.append(job)
    except Exception:
        for job in submitted:
            job.cancel("disconnected")
        raise
    texts = [TextStream(server.target.tokenizer, req.stops()) for _ in jobs]
    rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
    head = {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": server.name}

    def usage() -> dict:
        prompt, completion = sum(map(len, prompts)), sum(t.tokens for t in texts)     # prompts count once
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    if not req.stream:
        watchers = [asyncio.create_task(watch_disconnect(request, job)) for job in jobs]
        try:
            results = await asyncio.gather(*(collect(job, text) for job, text in zip(jobs, texts)))
        finally:
            for w in watchers:
                w.cancel()
            for job in jobs:
                job.cancel("disconnected")          # no-op once finished; stops the others if one failed
        choices = [{"index": i, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
                   if chat else {"index": i, "text": content, "logprobs": None, "finish_reason": finish}
                   for i, (content, finish) in enumerate(results)]
        return {**head, "choices": choices, "usage": usage(), "speculative": speculative_summary(jobs[0])}

    job, text = jobs[0], texts[0]
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
        try:
            if chat:
                yield chunk(None, None, role=True)
            try:
                async for piece, finish in events(job, text):
                    yield chunk(piece, finish)
            except Exception as e:
                e = e if isinstance(e, APIError) else server_error(f"internal error: {type(e).__name__}: {e}")
                yield sse(e.body())
                return
            if req.stream_options and req.stream_options.include_usage:
                yield sse({**chunk_head, "choices": [], "usage": usage()})
            yield "data: [DONE]\n\n"
        finally:
            job.cancel("disconnected")              # the client went away before the first event, say

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
