"""llama.cpp as a `verispec bench` peer, on the very GGUF file the target was made from (llama-cpp-python, the
optional extra `verispec[peers]`).

Methods: `llamacpp-plain` (llama.cpp's own decoding), `llamacpp-lookup` (its prompt-lookup drafting,
`LlamaPromptLookupDecoding`, k tokens a cycle, 10 under --k auto) and `llamacpp-draft` (the binding's draft-model
hook, `LlamaDraftModel`, fed k greedy tokens a cycle by llama.cpp running the target's named draft, e.g.
Qwen2.5-Coder-0.5B, or --draft's .gguf file, e.g. a draft `verispec export` wrote; 4 under --k auto). Same prompt
token ids, same new-token budget, same stop tokens; prefill included in the time, as for verispec's methods. Greedy
rows record whether the tokens equal verispec's plain decoding (llama.cpp's arithmetic differs from ours, so a few
late divergences are expected).
"""
from __future__ import annotations

import time
from pathlib import Path

import torch

from .errors import VerispecError
from .hf_compare import peer_stats
from .model import loader

LLAMACPP_METHODS = ("llamacpp-plain", "llamacpp-lookup", "llamacpp-draft")
LOOKUP_K, DRAFT_K = 10, 4


def greedy(llm, ids, n: int) -> list[int]:
    """The first n greedy tokens llama.cpp model `llm` decodes after `ids` (no stop tokens; it keeps its cache's
    common prefix)."""
    out = []
    for token in llm.generate(list(map(int, ids)), temp=0.0, top_k=1, reset=True):
        out.append(int(token))
        if len(out) == n:
            break
    return out


def _draft_model(llama_cpp, path: str, k: int, threads: int):
    """A `LlamaDraftModel` proposing the draft GGUF's k greedy tokens."""
    import numpy as np

    class Draft(llama_cpp.llama_speculative.LlamaDraftModel):
        def __init__(self):
            self.llm = llama_cpp.Llama(path, n_ctx=8192, n_batch=512, n_threads=threads, verbose=False)

        def __call__(self, input_ids, **kwargs):
            return np.array(greedy(self.llm, input_ids, k), dtype=np.intc)
    return Draft()


def _draft_gguf(target, draft: str | None):
    """The GGUF llama.cpp drafts with: --draft's .gguf file (e.g. one `verispec export --format gguf` wrote), else
    the GGUF the draft model (default: the target's named draft) was made from."""
    from .api import default_draft
    if draft and Path(draft).suffix == ".gguf" and Path(draft).is_file():
        return Path(draft)
    return loader.gguf_source(loader.resolve(draft or default_draft(target), weights=False))


def probe(path: str, threads: int) -> None:
    """llama.cpp first decodes a short prompt of `path` in a child process, so that a build which crashes on this
    CPU is a one-line error instead of the end of the bench (seen: llama-cpp-python 0.3.36 built natively on an
    AMX machine, signal 11 at its first decode of two or more prompt tokens; one token passed)."""
    import subprocess
    import sys
    code = ("import sys, llama_cpp\n"
            "m = llama_cpp.Llama(sys.argv[1], n_ctx=64, n_threads=int(sys.argv[2]), verbose=False)\n"
            "next(iter(m.generate(m.tokenize(b'def mean(values): return sum(values)'), temp=0.0, top_k=1)))\n")
    done = subprocess.run([sys.executable, "-c", code, path, str(threads)], capture_output=True, text=True)
    if done.returncode < 0:
        raise VerispecError(f"llama.cpp crashed (signal {-done.returncode}) decoding {Path(path).name} on this "
                            "machine: rebuild llama-cpp-python without AMX, e.g. CMAKE_ARGS=\"-DGGML_NATIVE=OFF "
                            "-DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON\" pip install --no-cache-dir --force-reinstall "
                            "--no-deps llama-cpp-python==0.3.36")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1][:200]
        raise VerispecError(f"llama.cpp could not decode {Path(path).name}: {last}")


class LlamaCppRunner:
    def __init__(self, target, methods: list[str], cfg, draft_name: str | None = None):
        try:
            import llama_cpp
        except ImportError:
            raise VerispecError("llamacpp-* methods need llama-cpp-python: pip install 'verispec[peers]'") from None
        unknown = [m for m in methods if m not in LLAMACPP_METHODS]
        if unknown:
            raise VerispecError(f"unknown method(s) {', '.join(unknown)}: llama.cpp methods are "
                                f"{', '.join(LLAMACPP_METHODS)}")
        path, threads = str(loader.gguf_source(Path(target.folder))), torch.get_num_threads()
        probe(path, threads)
        self.models = {}
        for m in methods:
            draft = None
            if m == "llamacpp-lookup":
                k = cfg.k if isinstance(cfg.k, int) else LOOKUP_K
                draft = llama_cpp.llama_speculative.LlamaPromptLookupDecoding(num_pred_tokens=k)
            elif m == "llamacpp-draft":
                draft = _draft_model(llama_cpp, str(_draft_gguf(target, draft_name)),
                                     cfg.k if isinstance(cfg.k, int) else DRAFT_K, threads)
            self.models[m] = llama_cpp.Llama(path, n_ctx=8192, n_batch=512, n_threads=threads,
                                             draft_model=draft, verbose=False, seed=cfg.seed)
        self.cfg = cfg
        self(target.tokenizer.prompt_ids("Hello!"), None)  # warm-up

    def __call__(self, ids: list[int], plain_tokens: list[int] | None) -> dict:
        s, out = self.cfg.sampling, {}
        for method, llm in self.models.items():
            llm.reset()
            tokens, t0 = [], time.perf_counter()
            for token in llm.generate(ids, temp=s.temperature, top_k=s.top_k if s.top_k else 0,
                                      top_p=s.top_p, reset=True):
                if token in self.cfg.stop_token_ids:
                    break
                tokens.append(token)
                if len(tokens) >= self.cfg.max_new_tokens:
                    break
            elapsed = time.perf_counter() - t0
            out[method] = peer_stats(tokens, len(tokens), elapsed)    # stop tokens not counted, as in ours
        return out
