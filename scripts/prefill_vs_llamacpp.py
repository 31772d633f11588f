"""Prefill (time to the first token's logits) against llama.cpp on the same GGUF, interleaved round by round.

    python scripts/prefill_vs_llamacpp.py MODEL DTYPE N [ROUNDS]     (e.g. qwen2.5-coder-1.5b gguf-q8 1024 3)

Prefills the first N tokens (by each tokenizer) of the first long prompt (../shared/data/prompts/long.jsonl) with
verispec (MODEL in DTYPE, a named GGUF model) and with llama.cpp (`llama-cpp-python`, the `peers` extra: the same
file, 2 threads, batch 512), ROUNDS times each, alternating, and prints each one's median in s, tok/s and ms per
token. 2 threads.
"""
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from verispec.api import Target
from verispec.errors import VerispecError
from verispec.model import catalog
from verispec.model.loader import home

PROMPTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "prompts" / "long.jsonl"


@torch.inference_mode()
def main() -> int:
    torch.set_num_threads(2)
    if len(sys.argv) not in (4, 5):
        print("usage: " + next(line.strip() for line in __doc__.splitlines() if "python scripts" in line), file=sys.stderr)
        return 2
    model, dtype, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rounds = int(sys.argv[4]) if len(sys.argv) == 5 else 3
    try:
        from llama_cpp import Llama
    except ImportError:
        print("llama-cpp-python is not installed: pip install -e '.[peers]'", file=sys.stderr)
        return 1
    try:
        target = Target.load(model, dtype, "cpu")
        gguf = catalog.gguf_path(model, home() / "downloads")
    except VerispecError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    text = json.loads(PROMPTS.open().readline())["prompt"]
    ours = target.tokenizer.encode(text)[:n]
    peer = Llama(model_path=str(gguf), n_ctx=n + 64, n_threads=2, n_batch=512, verbose=False)
    theirs = peer.tokenize(text.encode())[:n]
    times = {"verispec": [], "llama.cpp": []}
    for _ in range(rounds):
        cache = target.model.new_cache(len(ours) + 8)
        t0 = time.perf_counter()
        hidden = target.model(torch.tensor([ours]), torch.arange(len(ours))[None], cache)
        target.model.logits(hidden[:, -1:])
        times["verispec"].append(time.perf_counter() - t0)
        peer.reset()
        t0 = time.perf_counter()
        peer.eval(theirs)
        times["llama.cpp"].append(time.perf_counter() - t0)
    for name, tokens in (("verispec", ours), ("llama.cpp", theirs)):
        t = statistics.median(times[name])
        print(f"{name:<9} {model} {dtype if name == 'verispec' else 'its own kernels'}: {len(tokens)} tokens in "
              f"{t:.2f} s, {len(tokens) / t:.0f} tok/s, {1e3 * t / len(tokens):.2f} ms a token (median of {rounds})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
