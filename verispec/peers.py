"""llama.cpp as a `verispec bench` peer, on the very GGUF file the target was made from (llama-cpp-python, the
optional extra `verispec[peers]`).

Methods: `llamacpp-plain` (llama.cpp's own decoding) and `llamacpp-lookup` (its prompt-lookup drafting,
`LlamaPromptLookupDecoding`, k tokens a cycle, 10 under --k auto). Same prompt token ids, same new-token budget,
same stop tokens; prefill included in the time, as for verispec's methods. Greedy rows record whether the tokens
equal verispec's plain decoding (llama.cpp's arithmetic differs from ours, so a few late divergences are expected).
"""
from __future__ import annotations

import time

import torch

from .errors import VerispecError

LLAMACPP_METHODS = ("llamacpp-plain", "llamacpp-lookup")
LOOKUP_K = 10


class LlamaCppRunner:
    def __init__(self, target, methods: list[str], cfg):
        try:
            import llama_cpp
        except ImportError:
            raise VerispecError("llamacpp-* methods need llama-cpp-python: pip install 'verispec[peers]'") from None
        unknown = [m for m in methods if m not in LLAMACPP_METHODS]
        if unknown:
            raise VerispecError(f"unknown method(s) {', '.join(unknown)}: llama.cpp methods are "
                                f"{', '.join(LLAMACPP_METHODS)}")
        from .model.loader import gguf_source
        from pathlib import Path
        path = str(gguf_source(Path(target.folder)))
        k = cfg.k if isinstance(cfg.k, int) else LOOKUP_K
        self.models = {}
        for m in methods:
            draft = llama_cpp.llama_speculative.LlamaPromptLookupDecoding(num_pred_tokens=k) \
                if m == "llamacpp-lookup" else None
            self.models[m] = llama_cpp.Llama(path, n_ctx=8192, n_batch=512, n_threads=torch.get_num_threads(),
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
            new = len(tokens)                                               # stop tokens not counted, as in ours
            out[method] = {"tokens_per_s": new / elapsed, "new_tokens": new, "target_passes": 1,
                           "mean_accepted_tokens": None, "checked_tokens": 0, "accepted_tokens": 0,
                           "acceptance_by_position": [], "_accepted_by_position": [], "_checked_by_position": [],
                           "_tokens": tokens, "time_total_s": elapsed}
        return out
