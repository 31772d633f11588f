"""The exported GGUF draft against verispec's own: greedy tokens of the draft decoding alone, in llama.cpp
(llama-cpp-python, the optional extra) and in verispec (fp32), from the same prompt token ids (verispec's chat
template). Used by tests/test_export_gguf.py and scripts/gguf_roundtrip.py.
"""
from __future__ import annotations

import torch

from ..errors import VerispecError


def verispec_greedy(draft, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Each prompt's `new_tokens` greedy tokens from `draft` (a Llama) decoding alone, no stop tokens."""
    from ..engine import Engine, GenerationConfig
    engine, cfg = Engine(draft), GenerationConfig(max_new_tokens=new_tokens)
    return [engine.generate(ids, cfg).token_ids for ids in prompts]


def llamacpp_greedy(path, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Each prompt's `new_tokens` greedy tokens from the GGUF at `path` under llama.cpp, no stop tokens."""
    try:
        import llama_cpp
    except ImportError:
        raise VerispecError("the llama.cpp round trip needs llama-cpp-python: pip install 'verispec[peers]'") from None
    from ..peers import greedy
    llm = llama_cpp.Llama(str(path), n_ctx=2048, n_batch=512, n_threads=torch.get_num_threads(), verbose=False)
    return [greedy(llm, ids, new_tokens) for ids in prompts]


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first position where two token lists differ (None: identical)."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))
