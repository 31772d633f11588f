"""`verispec train-medusa`: Medusa heads on the frozen target's last hidden states, from distill-data output.

1. Features: the target (frozen, in the dtype it decodes in) runs over each answer once; the final-normed
   hidden state at the position predicting answer token t is row t. Kept beside the data (`features.py`).
2. Training: head i (i = 1..K) on row t learns the target's distribution for answer token t + i: KL to the
   stored top-K probabilities (distillation), restricted to the heads' output tokens.
3. Held-out measurement: acceptance[d][r] = how often head d + 1's rank-r choice is the target's greedy token
   there. `tree_from_acceptance` turns it into the default trees; `trees.json` keeps both.
Deterministic in (data, flags, seed); checkpoints hold heads, optimiser and step, so a resumed run equals an
uninterrupted one.
"""
from __future__ import annotations

import time

import torch

from ..model import ops
from ..model.medusa import MedusaHeads
from .data import Example
from .draft import cosine_lr, descend

RANKS = 8       # acceptance is measured for each head's top RANKS choices


def answer_features(target, examples: list[Example], batch: int = 8, on_batch=None,
                    whole: bool = False, taps: tuple[int, ...] = ()) -> list[torch.Tensor]:
    """Per example, [answer length, D] target hidden states: row t is the state that predicts answer token t.
    whole=True: [n - 1, D], the states at every position but the last (row j predicts token j + 1).
    taps: also the outputs of these decoder layers (before the final norm), [..., (len(taps) + 1) D], the
    final-normed state last. The target runs on PyTorch's operators (`ops.pytorch_operators`): training needs
    speed, not row invariance."""
    out, tapped = [], {}
    hooks = [target.layers[i].register_forward_hook(lambda m, a, y, i=i: tapped.__setitem__(i, y)) for i in taps]
    try:
        for i in range(0, len(examples), batch):
            group = examples[i:i + batch]
            length = max(len(e.tokens) for e in group)
            tokens = torch.zeros(len(group), length, dtype=torch.long)
            for r, e in enumerate(group):
                tokens[r, :len(e.tokens)] = e.tokens                            # right padding: causal, harmless
            positions = torch.arange(length)[None].expand_as(tokens)
            with torch.inference_mode(), ops.pytorch_operators():      # training: speed, not row invariance
                hidden = target(tokens.to(target.device), positions.to(target.device), None)   # [B, L, D]
                hidden = torch.cat([*(tapped[t] for t in taps), hidden], -1)        # [B, L, (taps + 1) D]
            for r, e in enumerate(group):
                out.append(hidden[r, 0 if whole else e.first - 1:len(e.tokens) - 1].cpu().clone())
            if on_batch is not None:
                on_batch(len(group))
    finally:
        for h in hooks:
            h.remove()
    return out


def head_targets(examples: list[Example], num_heads: int, head_index: torch.Tensor):
    """Soft targets per row and head, aligned with `answer_features` concatenated.

    Returns ids [N, K, S] (head rows, -1 where absent), probs [N, K, S], greedy [N, K] (the target's top-1
    vocabulary id, -1 past the answer's end)."""
    ids, ps, greedy = [], [], []
    for e in examples:
        a, s = e.topk_ids.shape
        i = torch.full((a, num_heads, s), -1, dtype=torch.long)
        p = torch.zeros(a, num_heads, s)
        g = torch.full((a, num_heads), -1, dtype=torch.long)
        for h in range(1, num_heads + 1):                                       # head h: answer token t + h
            if a > h:
                i[:a - h, h - 1] = head_index[e.topk_ids[h:]]
                p[:a - h, h - 1] = e.topk_probs[h:]
                g[:a - h, h - 1] = e.topk_ids[h:, 0]
        ids.append(i)
        ps.append(p.masked_fill(i < 0, 0.0))
        greedy.append(g)
    return torch.cat(ids), torch.cat(ps), torch.cat(greedy)


def kl_loss(logits: torch.Tensor, ids: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
    """logits [B, K, H]; soft cross-entropy to the stored top-S probabilities, per live (row, head)."""
    logq = logits.log_softmax(-1).gather(-1, ids.clamp_min(0))                 # [B, K, S]
    live = probs.sum(-1) > 0                                                    # [B, K]
    return -(probs * logq).sum(-1)[live].mean()


@torch.no_grad()
def acceptance(heads: MedusaHeads, feats: torch.Tensor, greedy: torch.Tensor, ranks: int = RANKS,
               batch: int = 1024) -> list[list[float]]:
    """acceptance[d][r]: how often head d + 1's rank-r choice equals the target's greedy token."""
    hits = torch.zeros(heads.num_heads, ranks)
    live = torch.zeros(heads.num_heads)
    for i in range(0, len(feats), batch):
        logits = heads(feats[i:i + batch].to(heads.out.dtype))                   # [B, K, H]
        top = heads.head_ids[logits.topk(ranks, -1).indices]                     # [B, K, ranks] vocabulary ids
        g = greedy[i:i + batch]                                                  # [B, K]
        hits += ((top == g[..., None]) & (g[..., None] >= 0)).float().sum(0)
        live += (g >= 0).float().sum(0)
    return (hits / live.clamp_min(1)[:, None]).tolist()


def train_steps(heads: MedusaHeads, opt, feats, ids, probs, start: int, stop: int, steps: int, lr: float,
                batch: int, seed: int, on_step=None) -> None:
    """Steps [start, stop): step s trains on rows drawn by a generator seeded with (seed, s)."""
    heads.train()
    for step in range(start, stop):
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        rows = torch.randint(len(feats), (batch,), generator=g)
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr, min(50, steps // 10))
        t0 = time.perf_counter()
        loss = kl_loss(heads(feats[rows].float()), ids[rows], probs[rows])
        descend(heads, opt, loss)
        if on_step is not None:
            on_step(step, float(loss.detach()), time.perf_counter() - t0)
