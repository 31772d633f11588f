"""A chat's second turn with the server's prefix cache and without it, side by side in one server.

    python scripts/prefix_ttft.py MODEL DTYPE METHOD [--prompts FILE] [--limit N] [--max-tokens N] [--tree T]

For each prompt: turn 1 (the prompt), then turn 2 (turn 1, its answer, a follow-up), streamed, greedy, through
one server whose prefix cache is switched off (--prefix-cache-mb 0), on (a fresh 1,024 MB cache), or on but
keeping prompts only, not the answers decoded after them (as before Session 55), between the runs, whose order
rotates from prompt to prompt. Prints each turn's time to first token and total seconds, their medians, and
whether every run gave the same text (they must: the output is exact either way)."""
import argparse
import json
import statistics
import sys
import time

import httpx

from verispec.api import Target
from verispec.serve.app import Server
from verispec.serve.loadtest import free_port, start_server
from verispec.serve.prefix import PrefixCache

FOLLOW_UP = "Thank you. Now say the same again in one sentence."


def chat(base: str, name: str, messages: list[dict], max_tokens: int) -> tuple[float, float, str]:
    """(seconds to the first token, seconds in all, text) of one streamed greedy request."""
    t0, first, text = time.perf_counter(), None, []
    body = {"model": name, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=600) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
            if delta and first is None:
                first = time.perf_counter() - t0
            text.append(delta)
    return first or float("nan"), time.perf_counter() - t0, "".join(text)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("model"), p.add_argument("dtype"), p.add_argument("method")
    p.add_argument("--prompts", default="../shared/data/prompts/long.jsonl")
    p.add_argument("--limit", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--tree")
    a = p.parse_args()
    prompts = [json.loads(line)["prompt"] for line in open(a.prompts)][:a.limit]
    target = Target.load(a.model, a.dtype)
    server = Server(target, a.method, "auto", max_batch=4, tree=a.tree, prefill_chunk=64)
    uv = start_server(server, free_port())
    base = f"http://127.0.0.1:{uv.config.port}"
    tok, rows, same = target.tokenizer, {"off": [], "prompts": [], "on": []}, True
    finish, mode = server.scheduler._finish, "off"

    def prompts_only(job):                       # "prompts": the request's answer is not kept at its end
        if mode == "prompts":
            job.sequence.features = None
        finish(job)
    server.scheduler._finish = prompts_only
    try:
        chat(base, server.name, [{"role": "user", "content": "Hello"}], 4)                 # warm-up
        for i, prompt in enumerate(prompts):
            texts = {}
            for mode in list(rows)[i % 3:] + list(rows)[:i % 3]:
                cache = PrefixCache(1024) if mode != "off" else None
                server.scheduler.call(lambda: setattr(server.scheduler, "prefix", cache))
                turn1 = [{"role": "user", "content": prompt}]
                t1 = chat(base, server.name, turn1, a.max_tokens)
                turn2 = turn1 + [{"role": "assistant", "content": t1[2]}, {"role": "user", "content": FOLLOW_UP}]
                t2 = chat(base, server.name, turn2, a.max_tokens)
                rows[mode].append((t1, t2, len(tok.chat_ids(turn2))))
                texts[mode] = (t1[2], t2[2])
                print(f"prompt {i} {mode:7s}: turn 1 first token {t1[0]:6.2f} s, all {t1[1]:6.2f} s; turn 2 "
                      f"({rows[mode][-1][2]} prompt tokens) first token {t2[0]:6.2f} s, all {t2[1]:6.2f} s",
                      flush=True)
            same &= texts["on"] == texts["off"] == texts["prompts"]
    finally:
        uv.should_exit = True
    med = {m: [statistics.median(r[t][j] for r in rows[m]) for t in (0, 1) for j in (0, 1)] for m in rows}
    for m in rows:
        print(f"median, prefix cache {m:7s}: turn 1 first token {med[m][0]:.2f} s, all {med[m][1]:.2f} s; turn 2 "
              f"first token {med[m][2]:.2f} s, all {med[m][3]:.2f} s")
    print(f"turn 2 time to first token, on / off: {med['on'][2] / med['off'][2]:.3f}, on / prompts only: "
          f"{med['on'][2] / med['prompts'][2]:.3f}; same text in every mode: {'yes' if same else 'NO'} "
          f"({len(prompts)} prompts, {a.method}, {a.dtype}, {a.max_tokens} new tokens a turn)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
