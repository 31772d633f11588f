"""Batched sampling from the target, for self-distillation data.

Each prompt has a cache of its own, and every pass packs the rows still answering, ragged (`forward_packed`): no
padding, no mask, and each row attends over its own sequence as decoding it alone would (a left-padded batch
spent most of a long prompt's prefill on pad rows). Each row has its own sampling temperature (0 = greedy) and
stop; its output does not depend on which rows share its batch (bit for bit on the row-invariant kernels).
Besides the tokens, each step keeps the target's top-K next-token probabilities at temperature 1, the soft
targets a draft is distilled on.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..model.llama import Llama
from ..sampling import sample


@dataclass
class Sampled:
    answer: list[int]              # generated tokens, the stop token included when one was produced
    topk_ids: torch.Tensor         # [len(answer), K] int32: target's most likely next tokens at each step
    topk_probs: torch.Tensor       # [len(answer), K] float16: their probabilities at temperature 1


@torch.inference_mode()
def sample_batch(model: Llama, prompts: list[list[int]], temperatures: list[float], max_new_tokens: int,
                 stop_token_ids: frozenset[int], seed: int, top_k: int = 32) -> list[Sampled]:
    device = model.device
    batch = len(prompts)
    caches = [model.new_cache(len(p) + max_new_tokens) for p in prompts]
    hidden = model.forward_packed([(torch.tensor([p], device=device), torch.arange(len(p), device=device)[None],
                                    c, None) for p, c in zip(prompts, caches)])          # each [1, n_i, D]
    logits = model.logits(torch.cat([h[:, -1] for h in hidden]))                           # [batch, vocab]

    temps = torch.tensor(temperatures, device=device, dtype=torch.float32)[:, None]         # [batch, 1]
    greedy = temps[:, 0] == 0
    gen = torch.Generator().manual_seed(seed)
    stops = torch.tensor(sorted(stop_token_ids), device=device)
    next_pos = torch.tensor([len(p) for p in prompts], device=device)                       # [batch]
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    steps_tokens, steps_ids, steps_probs, steps_live = [], [], [], []
    for step in range(max_new_tokens):
        p1 = logits.softmax(-1)                                                              # [batch, vocab]
        top = p1.topk(top_k, dim=-1)
        warped = (logits / temps.clamp_min(1e-6)).softmax(-1)
        u = torch.rand(batch, generator=gen).to(device)
        token = torch.where(greedy, logits.argmax(-1), sample(warped, u))                   # [batch]
        steps_tokens.append(token)
        steps_ids.append(top.indices.int())
        steps_probs.append(top.values.half())
        steps_live.append(~done)
        done = done | torch.isin(token, stops)
        if bool(done.all()) or step == max_new_tokens - 1:
            break
        answering = (~done).nonzero()[:, 0].tolist()           # finished rows pass no more (their tokens are dropped)
        hidden = model.forward_packed([(token[b].view(1, 1), (next_pos[b] + step).view(1, 1), caches[b], None)
                                       for b in answering])                                 # each [1, 1, D]
        logits = logits.clone()
        logits[answering] = model.logits(torch.cat([h[:, -1] for h in hidden]))             # [answering, vocab]

    live = torch.stack(steps_live, 1).cpu()                                                  # [batch, steps]
    tokens_out = torch.stack(steps_tokens, 1).cpu()
    ids, probs = torch.stack(steps_ids, 1).cpu(), torch.stack(steps_probs, 1).cpu()          # [batch, steps, K]
    out = []
    for b in range(batch):
        n = int(live[b].sum())
        out.append(Sampled(tokens_out[b, :n].tolist(), ids[b, :n].clone(), probs[b, :n].clone()))
    return out
