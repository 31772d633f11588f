"""Peers for `verispec bench`: Hugging Face `transformers` generate on the same checkpoint, dtype and prompts.

Methods: `hf-plain` (generate), `hf-ngram` (generate with prompt_lookup_num_tokens = k), `hf-draft` (assisted
generation, assistant_model = the same draft verispec's `draft` method uses). Each row records whether its greedy
output matched verispec's plain decoding token for token.
"""
from __future__ import annotations

import time

import torch

from .errors import VerispecError

HF_LOOKUP_K = 10     # prompt_lookup_num_tokens when verispec's k is "auto" (transformers' documented example)
HF_METHODS = {"hf-plain": {}, "hf-ngram": {"prompt_lookup_num_tokens": None}, "hf-draft": {"assistant_model": None}}


def as_hf_model(draft, torch_dtype):
    """Our draft (a `Llama`) as a transformers LlamaForCausalLM with the same weights. A reduced output head
    becomes a full-vocabulary one whose rows outside the kept tokens are zero: those tokens get logit 0 there
    instead of probability 0, which transformers cannot express."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from .model.loader import split_to_hf
    c = draft.cfg
    hc = LlamaConfig(vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
                     num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
                     num_key_value_heads=c.num_kv_heads, rope_theta=c.rope_theta, rms_norm_eps=c.rms_eps,
                     max_position_embeddings=c.max_position, tie_word_embeddings=c.tie_embeddings)
    sd = {k: v.float() for k, v in split_to_hf(draft).items()}
    sd["model.embed_tokens.weight"] = draft.embed.weight.float()
    if c.head_tokens:
        head = torch.zeros(c.vocab_size, c.hidden_size)
        head[sd.pop("lm_head.token_ids").long()] = sd["lm_head.weight"]
        sd["lm_head.weight"] = head
    model = LlamaForCausalLM(hc)
    model.load_state_dict(sd, strict=False)
    return model.to(torch_dtype).to(draft.device).eval()


def peer_stats(tokens: list[int], new: int, elapsed: float) -> dict:
    """A peer's run as a bench row: its speed and tokens; it reports no passes or acceptance of its own."""
    return {"tokens_per_s": new / elapsed, "new_tokens": new, "target_passes": 1, "mean_accepted_tokens": None,
            "checked_tokens": 0, "accepted_tokens": 0, "acceptance_by_position": [], "_accepted_by_position": [],
            "_checked_by_position": [], "_tokens": tokens, "time_total_s": elapsed}


class HFRunner:
    def __init__(self, target, methods: list[str], cfg, draft: str | None = None):
        """draft: the draft model's folder for hf-draft (default: the shipped draft)."""
        try:
            from transformers import AutoModelForCausalLM
        except ImportError:
            raise VerispecError("hf-* methods need `transformers` installed") from None
        unknown = [m for m in methods if m not in HF_METHODS]
        if unknown:
            raise VerispecError(f"unknown method(s) {', '.join(unknown)}: hf methods are {', '.join(HF_METHODS)}")
        dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}.get(target.dtype)
        if dtype is None:
            raise VerispecError(f"hf-* methods compare a fp32 or bf16 model with transformers', not --dtype "
                                f"{target.dtype}")
        self.model = AutoModelForCausalLM.from_pretrained(target.folder, dtype=dtype).to(target.model.device)
        self.model.eval()
        if "hf-draft" in methods:
            from .api import default_draft
            from .model import loader
            model, _, _ = loader.load(draft or default_draft(target), "fp32", "cpu",
                                      need_tokenizer=False, target_embedding=target.model.embed.weight.float().cpu())
            self.assistant = as_hf_model(model, dtype).to(target.model.device)
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
            kw["prompt_lookup_num_tokens"] = self.cfg.k if isinstance(self.cfg.k, int) else HF_LOOKUP_K
        if "assistant_model" in HF_METHODS[method]:
            kw["assistant_model"] = self.assistant
            if isinstance(self.cfg.k, int):      # else transformers' own schedule for the draft length
                kw.update(num_assistant_tokens=self.cfg.k, num_assistant_tokens_schedule="constant")
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
            out[method] = peer_stats(tokens, new, elapsed)
        return out
