"""`verispec train-eagle`: an EAGLE head on the frozen target's features, over distill-data sequences.

1. Features: the target (frozen, in --dtype, on PyTorch's operators) runs over each whole sequence once; row j
   is its final-normed hidden state f_j at position j. Kept beside the data (`features.py`).
2. Training: at position j the head sees f_j (plus uniform noise, as EAGLE does, so it tolerates its own
   imperfect predictions when drafting) and token x_{j+1}, and predicts f_{j+1}. Loss: smooth L1 to f_{j+1}
   (feature regression) plus `cls_weight` x the KL divergence from the target's distribution
   softmax(W f_{j+1}) to the head's softmax(W f^_{j+1}), both over the head's tokens.
3. Held-out measurement: how often the head's top-1 token (teacher-forced) is the target's, and per draft depth
   and rank, how often drafting from the head's own predicted features finds the target's greedy token
   (`draft_acceptance`, the table the default trees and `--tree auto` are grown from, as for Medusa).
4. `--unroll N` adds a training-time test: the head also drafts N - 1 steps from its own predictions, with the
   attention it has when drafting, and learns from those too (`unrolled`).
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from ..model.eagle import EagleHead
from .draft import cosine_lr, descend


def pad_batch(feats: list[torch.Tensor], tokens: list[torch.Tensor], head: EagleHead):
    """Sequences -> (inputs f_j [B, L, in_width] float, tokens x_{j+1} [B, L], targets f_{j+1} [B, L, D] float,
    positions [B, L], valid [B, L] bool), L = the longest sequence's length minus 2. A sequence's features are
    [n - 1, (taps + 1) D], the final-normed state last: the inputs are the columns the head reads, the targets
    the final state."""
    length = max(len(f) for f in feats) - 1
    b, d = len(feats), head.cfg.hidden_size
    cols = slice(None) if head.final else slice(0, head.in_width)
    f_in, f_out = torch.zeros(b, length, head.in_width), torch.zeros(b, length, d)
    x = torch.zeros(b, length, dtype=torch.long)
    valid = torch.zeros(b, length, dtype=torch.bool)
    for r, (f, t) in enumerate(zip(feats, tokens)):
        n = len(f) - 1                                            # f: [seq - 1, .] = f_0 .. f_{seq-2}
        f_in[r, :n], f_out[r, :n] = f[:-1, cols].float(), f[1:, -d:].float()
        x[r, :n] = t[1:n + 1]
        valid[r, :n] = True
    positions = torch.arange(length)[None].expand(b, length)
    return f_in, x, f_out, positions, valid


def unroll_mask(n: int, step: int) -> torch.Tensor:
    """[1, n, (step + 1) n] bool: at unrolled step `step`, row j (position j + step) sees the first pass's rows
    0..j (the target's true features) and row j of every later step (the head's own predictions), exactly the
    keys it has when drafting step + 1 tokens after position j."""
    i = torch.arange(n)
    mask = torch.zeros(n, (step + 1) * n, dtype=torch.bool)
    mask[:, :n] = i[None, :] <= i[:, None]
    for s in range(1, step + 1):
        mask[i, s * n + i] = True
    return mask[None]


def unrolled(head: EagleHead, f_in, x, positions, steps: int) -> list[torch.Tensor]:
    """Training-time test (as EAGLE-3 and HASS train): step 0 predicts f_{j+1} from the true f_j; step s
    predicts f_{j+s+1} from the head's own step s - 1 prediction and token x_{j+s+1}, attending as in drafting.
    Returns the predicted features of each step, [B, L, D]. Each step gets a fresh cache holding the earlier
    steps' keys: a cache written in place after a step has read it would break autograd."""
    b, n, _ = f_in.shape
    preds, feats, prev = [], f_in, None
    for s in range(steps):
        cache = head.decoder.new_cache((s + 1) * n, batch=b)
        if prev is not None:
            cache.k[:, :, :, :s * n], cache.v[:, :, :, :s * n] = prev.k[:, :, :, :s * n], prev.v[:, :, :, :s * n]
            cache.advance(s * n)
        tokens = F.pad(x[:, s:], (0, s))                                          # x_{j+s+1} at row j
        feats = head(feats, tokens, positions + s, cache, unroll_mask(n, s))     # [B, L, D] f^_{j+s+1}
        preds.append(feats)
        prev = cache
    return preds


def eagle_loss(head: EagleHead, f_in, x, f_out, positions, valid, cls_weight: float, noise: float = 0.0,
               generator: torch.Generator | None = None, unroll: int = 1) -> tuple[torch.Tensor, dict]:
    """Smooth L1 to the true next features plus cls_weight x KL(target || head), averaged over the `unroll`
    steps of the training-time test (1 = EAGLE's teacher-forced loss). Reports step 0's top-1 agreement."""
    if noise:
        f_in = f_in + (torch.rand(f_in.shape, generator=generator) * 2 - 1) * noise
    f_in = head.fuse_features(f_in)                                                     # [B, L, D]
    preds = [head(f_in, x, positions)] if unroll == 1 else unrolled(head, f_in, x, positions, unroll)
    total, parts = 0.0, {}
    for s, pred in enumerate(preds):
        ok = valid[:, s:] & valid[:, :valid.shape[1] - s]                # rows j whose f_{j+s+1} exists
        target, pred = f_out[:, s:][ok], pred[:, :pred.shape[1] - s][ok]
        reg = F.smooth_l1_loss(pred, target)
        logq = head.logits(pred).log_softmax(-1)                                          # [N, H]
        with torch.no_grad():
            logp = head.logits(target).log_softmax(-1)
        kl = (logp.exp() * (logp - logq)).sum(-1).mean()
        total = total + (reg + cls_weight * kl) / len(preds)
        if s == 0:
            parts = {"reg": float(reg.detach()), "kl": float(kl.detach()),
                     "top1": float((logq.argmax(-1) == logp.argmax(-1)).float().mean())}
    return total, parts


@torch.no_grad()
def draft_acceptance(head: EagleHead, feats: list[torch.Tensor], tokens: list[torch.Tensor], depth: int = 6,
                     ranks: int = 8, starts_per_sequence: int = 8) -> list[list[float]]:
    """Held-out acceptance[d][r]: how often the target's greedy token at draft depth d + 1 is the head's rank-r
    choice there, given the earlier draft tokens were the target's (features fed back are the head's own
    predictions, as in drafting). The same table Medusa's heads have: it grows the default trees."""
    hits, tried = torch.zeros(depth, ranks), torch.zeros(depth)
    for f, t in zip(feats, tokens):
        d = head.cfg.hidden_size
        f_in = head.fuse_features(f[:, slice(None) if head.final else slice(0, head.in_width)].float())   # [n, D]
        f = f[:, -d:].float()
        n = len(f)                                                  # f_0 .. f_{n-1}, tokens x_0 .. x_n
        greedy = head.head_ids[head.logits(f).argmax(-1)]          # [n] the target's choice for x_{j+1}
        for j in torch.linspace(1, max(1, n - depth - 1), starts_per_sequence).long().unique().tolist():
            cache = head.new_cache(j + depth + 1)
            pred = head(f_in[None, :j], t[None, 1:j + 1], torch.arange(j)[None], cache)[:, -1:]   # f^_j
            for d in range(min(depth, n - j)):
                top = head.head_ids[head.logits(pred[0, -1]).topk(ranks).indices]
                tried[d] += 1
                hits[d] += (top == greedy[j + d]).float()
                pred = head(pred, greedy[j + d].view(1, 1), torch.tensor([[j + d]]), cache)
    return (hits / tried.clamp_min(1)[:, None]).tolist()


def length_groups(feats: list[torch.Tensor], width: int) -> list[list[int]]:
    """Each sequence's group (`train_steps`): the sequences whose lengths fall in the same span of `width` tokens,
    [sequence] -> the indices of its group's members."""
    spans: dict[int, list[int]] = {}
    for i, f in enumerate(feats):
        spans.setdefault(len(f) // width, []).append(i)
    return [spans[len(f) // width] for f in feats]


def train_steps(head: EagleHead, opt, feats, tokens, start: int, stop: int, steps: int, lr: float, batch: int,
                seed: int, cls_weight: float, noise: float, on_step=None, autocast: bool = False,
                unroll: int = 1, groups: list[list[int]] | None = None) -> None:
    """Steps [start, stop): step s trains on sequences drawn by a generator seeded with (seed, s). With `groups`
    (`length_groups`) a batch's first sequence is drawn as before and the rest from its group: a few long sequences
    among many short ones then pad only batches of their own length."""
    head.train()
    for step in range(start, stop):
        g = torch.Generator().manual_seed(seed * 1_000_003 + step)
        rows = torch.randint(len(feats), (batch,), generator=g).tolist()
        if groups is not None:
            mates = groups[rows[0]]
            rows = rows[:1] + [mates[i] for i in torch.randint(len(mates), (batch - 1,), generator=g).tolist()]
        for group in opt.param_groups:
            group["lr"] = cosine_lr(step, steps, lr, min(50, steps // 10))
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):   # bf16 matrix units, fp32 weights
            loss, parts = eagle_loss(head, *pad_batch([feats[r] for r in rows], [tokens[r] for r in rows], head),
                                     cls_weight, noise, g, unroll)
        descend(head, opt, loss)
        if on_step is not None:
            on_step(step, float(loss.detach()), time.perf_counter() - t0)
