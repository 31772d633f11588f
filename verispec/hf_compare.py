"""Peers for `verispec bench`: Hugging Face `transformers` generate on the same checkpoint, dtype and prompts.

Methods: `hf-plain` (generate), `hf-ngram` (generate with prompt_lookup_num_tokens = k). Each row records whether
its greedy output matched verispec's plain decoding token for token.
"""
from __future__ import annotations

import time

import torch

from .errors import VerispecError

HF_METHODS = {"hf-plain": {}, "hf-ngram": {"prompt_lookup_num_tokens": None}}


class HFRunner:
    def __init__(self, target, methods: list[str], cfg):
        try:
            from transformers import AutoModelForCausalLM
        except ImportError:
            raise VerispecError("hf-* methods need `transformers` installed") from None
        unknown = [m for m in methods if m not in HF_METHODS]
        if unknown:
            raise VerispecError(f"unknown method(s) {', '.join(unknown)}: hf methods are {', '.join(HF_METHODS)}")
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[target.dtype]
        self.model = AutoModelForCausalLM.from_pretrained(target.folder, dtype=dtype).to(target.model.device)
        self.model.eval()
        self.methods, self.cfg = methods, cfg
        self.stop = sorted(cfg.stop_token_ids)
        self(target.tokenizer.prompt_ids("Hello!"), None)  # warm-up

    def _kwargs(self, method: str) -> dict:
        s = self.cfg.sampling
        kw = {"max_new_tokens": self.cfg.max_new_tokens, "eos_token_id": self.stop or None,
              "pad_token_id": (self.stop or [0])[0], "do_sample": not s.greedy}
        if not s.greedy:
            kw.update(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k or None)
        if "prompt_lookup_num_tokens" in HF_METHODS[method]:
            kw["prompt_lookup_num_tokens"] = self.cfg.k
        return kw

    @torch.inference_mode()
    def __call__(self, ids: list[int], plain_tokens: list[int] | None) -> dict:
        out = {}
        x = torch.tensor([ids], device=self.model.device)
        for method in self.methods:
            torch.manual_seed(self.cfg.seed)
            t0 = time.perf_counter()
            y = self.model.generate(x, attention_mask=torch.ones_like(x), **self._kwargs(method))
            elapsed = time.perf_counter() - t0
            tokens = y[0, len(ids):].tolist()
            new = len(tokens)
            while tokens and tokens[-1] in self.cfg.stop_token_ids:
                tokens.pop()
            out[method] = {"tokens_per_s": new / elapsed, "new_tokens": new, "target_passes": 1,
                           "mean_accepted_tokens": None, "checked_tokens": 0, "accepted_tokens": 0,
                           "acceptance_by_position": [], "_accepted_by_position": [], "_checked_by_position": [],
                           "_tokens": tokens}
        return out
