"""Python entry points: load a target, build a proposer by name, generate text.

    from verispec import Speculator
    spec = Speculator(method="ngram")                  # the embedded default target, bf16 on CPU
    result = spec.generate("Summarise: ...", max_new_tokens=64, temperature=0)
    print(result.text, result.stats["mean_accepted_tokens"])
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from .engine import Engine, GenerationConfig
from .errors import VerispecError
from .model import loader
from .model.llama import Llama
from .model.tokenizer import StreamDecoder, Tokenizer
from .proposers.base import Proposer
from .sampling import SamplingConfig

METHODS = ("plain", "ngram", "draft")
DEFAULT_DRAFT = Path(__file__).parent / "drafts" / "smollm2-135m-instruct-draft"


def pick_device(device: str | None) -> str:
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise VerispecError("--device cuda asked for, but no CUDA device is available")
    return device


@dataclass
class Target:
    model: Llama
    tokenizer: Tokenizer
    folder: str
    dtype: str
    is_default: bool = False      # the embedded default model (which has a shipped default draft)

    @classmethod
    def load(cls, model: str | None = None, dtype: str = "bf16", device: str | None = None) -> "Target":
        m, tok, folder = loader.load(model, dtype, pick_device(device))
        if tok.vocab_size > m.cfg.vocab_size:
            raise VerispecError(f"tokenizer has {tok.vocab_size} tokens but the model only {m.cfg.vocab_size}")
        return cls(m, tok, str(folder), dtype, model in (None, "default"))


def default_draft(target: Target) -> str:
    """The shipped distilled draft, for the default target only."""
    if not target.is_default:
        raise VerispecError("--method draft needs --draft PATH for this model (a Llama-family model sharing its "
                            "tokenizer); the shipped draft only fits the default SmolLM2-135M-Instruct")
    if not (DEFAULT_DRAFT / "config.json").exists():
        raise VerispecError(f"the shipped draft is missing from {DEFAULT_DRAFT}; pass --draft PATH")
    return str(DEFAULT_DRAFT)


def make_proposer(method: str, target: Target, draft: str | None = None, ngram_max: int = 3,
                  ngram_min: int = 1) -> Proposer | None:
    """Build the proposer called `method` for `target` (None for plain decoding)."""
    if method == "plain":
        return None
    if method == "ngram":
        from .proposers.ngram import NgramProposer
        return NgramProposer(ngram_max, ngram_min)
    if method == "draft":
        from .proposers.draft_model import DraftModelProposer
        model, tok, _ = loader.load(draft or default_draft(target), target.dtype, target.model.device, need_tokenizer=False)
        check_same_vocab(target, model, tok)
        return DraftModelProposer(model)
    raise VerispecError(f"unknown method {method!r}: choose from {', '.join(METHODS)}")


def check_same_vocab(target: Target, draft_model: Llama, draft_tok: Tokenizer | None) -> None:
    t_size, d_size = target.model.cfg.vocab_size, draft_model.cfg.vocab_size
    if t_size != d_size or (draft_tok is not None and target.tokenizer.vocab() != draft_tok.vocab()):
        raise VerispecError(f"the draft's vocabulary ({d_size} tokens) differs from the target's ({t_size}); "
                            "a draft must share the target's tokenizer")


@dataclass
class Result:
    text: str
    token_ids: list[int]
    stats: dict
    finish_reason: str


class Speculator:
    """A target plus one proposer, ready to generate text."""

    def __init__(self, model: str | None = None, method: str = "ngram", draft: str | None = None,
                 dtype: str = "bf16", device: str | None = None, target: Target | None = None):
        self.target = target or Target.load(model, dtype, device)
        self.engine = Engine(self.target.model, make_proposer(method, self.target, draft))

    def generate(self, prompt: str, max_new_tokens: int = 128, k: int = 4, temperature: float = 0.0,
                 top_p: float = 1.0, top_k: int = 0, seed: int = 0, chat: bool = True,
                 on_text=None) -> Result:
        tok = self.target.tokenizer
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, k=k, seed=seed,
                               sampling=SamplingConfig(temperature, top_k, top_p),
                               stop_token_ids=tok.stop_token_ids)
        stream = StreamDecoder(tok)
        on_tokens = None if on_text is None else (lambda ids: on_text(stream.push(ids)))
        g = self.engine.generate(tok.prompt_ids(prompt, chat), cfg, on_tokens)
        return Result(tok.decode(g.token_ids), g.token_ids, g.stats.to_dict(), g.finish_reason)
