"""`verispec train-draft`: distil a small Llama-family draft from the target's own answers.

alpha = 1 - TV(p, q), so the draft should match the target's whole next-token distribution, not only the token
the target happened to emit. Losses (all over answer positions only):
- kl:  forward KL to the target's stored top-K probabilities (soft cross-entropy, the constant entropy dropped);
- tvd: total variation, 1 - sum_i min(p_i, q_i) over the stored top-K: minus the acceptance rate itself;
- ce:  plain next-token cross-entropy on the emitted token (the ablation: no distillation).
Held-out metrics: `alpha` = mean sum_i min(p_i, q_i) (acceptance at temperature 1; the top-K truncation makes it a
slight under-estimate) and `greedy` = how often the draft's argmax is the target's (acceptance at temperature 0).

The draft's input embedding covers the whole vocabulary; its output head may cover only the most frequent tokens
(q = 0 elsewhere; the rejection rule's residual keeps sampling exact). Its embedding starts as the target's,
projected onto the target embeddings' leading principal directions when the draft is narrower.

Training is a deterministic function of (data, flags, seed): batches follow from (seed, epoch), and a checkpoint
holds model, optimiser and step, so a resumed run ends bitwise equal to an uninterrupted one.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch

from ..errors import VerispecError
from ..model.llama import Llama, LlamaConfig
from .data import Example, collate

LOSSES = ("kl", "tvd", "ce", "kl+tvd")


@dataclass(frozen=True)
class DraftShape:
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    intermediate: int = 768
    head_tokens: int = 8192       # 0 = full vocabulary
    from_target: bool = False     # the target's width, its first `layers` blocks as the start, its embedding
                                  # borrowed (frozen, not stored with the draft)

    def resolved(self, target: LlamaConfig) -> "DraftShape":
        if not self.from_target:
            return self
        return DraftShape(self.layers, target.hidden_size, target.num_heads, target.num_kv_heads,
                          target.intermediate_size, self.head_tokens, True)

    def config(self, target: LlamaConfig) -> LlamaConfig:
        s = self.resolved(target)
        return LlamaConfig(vocab_size=target.vocab_size, hidden_size=s.hidden,
                           intermediate_size=s.intermediate, num_layers=s.layers, num_heads=s.heads,
                           num_kv_heads=s.kv_heads, rope_theta=target.rope_theta, rms_eps=target.rms_eps,
                           max_position=target.max_position, tie_embeddings=not s.head_tokens,
                           head_tokens=s.head_tokens, embed_from_target=s.from_target)


def init_draft(target: Llama, shape: DraftShape, head_ids: torch.Tensor | None, seed: int) -> Llama:
    """A fresh draft: embedding (and head rows) from the target's embedding matrix; random blocks, or with
    shape.from_target the target's first blocks and final norm, and its embedding frozen."""
    torch.manual_seed(seed)
    target_cfg, target_embed = target.cfg, target.embed.weight.detach()
    shape = shape.resolved(target_cfg)
    model = Llama(shape.config(target_cfg))
    for name, p in model.named_parameters():
        if p.dim() == 2:
            torch.nn.init.normal_(p, std=0.02 / (math.sqrt(2 * shape.layers) if name.endswith(("wo.weight",
                                                                                        "w2.weight")) else 1))
    e = target_embed.float()                                               # [vocab, D_target]
    if shape.hidden < e.shape[1]:
        _, vecs = torch.linalg.eigh(e.T @ e)                                # ascending eigenvalues
        e = e @ vecs[:, -shape.hidden:]                                     # [vocab, hidden]
    elif shape.hidden > e.shape[1]:
        e = torch.cat([e, torch.zeros(e.shape[0], shape.hidden - e.shape[1])], 1)
    e = e * (0.02 / e.std())
    with torch.no_grad():
        if shape.from_target:
            e = target_embed.float()
            for mine, theirs in zip(model.layers, target.layers):
                mine.load_state_dict(theirs.state_dict())
            model.norm.load_state_dict(target.norm.state_dict())
        model.embed.weight.copy_(e)
        if head_ids is not None:
            model.head_ids.copy_(head_ids)
            model.lm_head.weight.copy_(e[head_ids])
    model.embed.weight.requires_grad_(not shape.from_target)
    return model


def losses(logits: torch.Tensor, targets, soft_ids, soft_probs) -> dict[str, torch.Tensor]:
    """logits [B, L, H] over the head; returns every loss and metric, averaged over answer positions."""
    live = targets >= 0                                                    # [B, L]
    logq = logits.float().log_softmax(-1)
    q_soft = logq.gather(-1, soft_ids.clamp_min(0)).exp() * (soft_ids >= 0)  # [B, L, K]
    kl = -(soft_probs * logq.gather(-1, soft_ids.clamp_min(0))).sum(-1)
    overlap = torch.minimum(soft_probs, q_soft).sum(-1)                    # sum_i min(p_i, q_i)
    ce = -logq.gather(-1, targets.clamp_min(0)[..., None])[..., 0]
    greedy = (logits.argmax(-1) == soft_ids[..., 0]).float()               # target's top-1 vs draft's
    mean = lambda x: x[live].mean()  # noqa: E731
    return {"kl": mean(kl), "tvd": 1 - mean(overlap), "ce": mean(ce), "kl+tvd": mean(kl) + 1 - mean(overlap),
            "alpha": mean(overlap), "greedy": mean(greedy)}


def forward_head(model: Llama, tokens: torch.Tensor) -> torch.Tensor:
    positions = torch.arange(tokens.shape[1])[None].expand_as(tokens)
    return model.logits(model(tokens, positions, None), full=False)        # [B, L, head]


@torch.no_grad()
def evaluate(model: Llama, examples: list[Example], head_index: torch.Tensor, batch: int = 16) -> dict:
    model.eval()
    sums, count = {}, 0
    for i in range(0, len(examples), batch):
        tokens, targets, soft_ids, soft_probs = collate(examples[i:i + batch], head_index)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = forward_head(model, tokens)
        n = int((targets >= 0).sum())
        for k, v in losses(logits, targets, soft_ids, soft_probs).items():
            sums[k] = sums.get(k, 0.0) + float(v) * n
        count += n
    model.train()
    if not count:
        raise VerispecError("no held-out answer token is among the draft's output tokens: raise --head-tokens")
    return {k: v / count for k, v in sums.items()}


def cosine_lr(step: int, steps: int, lr: float, warmup: int) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay to a tenth of `lr` at `steps`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def descend(model: torch.nn.Module, opt, loss: torch.Tensor, max_norm: float = 1.0) -> None:
    """One optimiser step on `loss`: gradients, clipped to `max_norm`, then the update."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    opt.step()


@dataclass(frozen=True)
class TrainConfig:
    loss: str = "kl"
    steps: int = 2000
    tokens_per_batch: int = 4096
    lr: float = 2e-3
    warmup: int = 100
    weight_decay: float = 0.01
    seed: int = 0

    def lr_at(self, step: int) -> float:
        return cosine_lr(step, self.steps, self.lr, self.warmup)


def make_optimizer(model: Llama, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() == 2]
    rest = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": rest, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))


def batch_stream(examples: list[Example], tokens_per_batch: int, seed: int):
    """Batches forever, epoch after epoch, each epoch's order fixed by (seed, epoch)."""
    from .data import batches
    epoch = 0
    while True:
        yield from batches(examples, tokens_per_batch, seed, epoch)
        epoch += 1


def train_steps(model: Llama, opt, examples: list[Example], head_index: torch.Tensor, cfg: TrainConfig,
                start: int, stop: int, on_step=None) -> None:
    """Run steps [start, stop); step s always trains on the s-th batch of the stream."""
    stream = batch_stream(examples, cfg.tokens_per_batch, cfg.seed)
    for _ in range(start):
        next(stream)
    model.train()
    for step in range(start, stop):
        tokens, targets, soft_ids, soft_probs = collate([examples[i] for i in next(stream)], head_index)
        for group in opt.param_groups:
            group["lr"] = cfg.lr_at(step)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = forward_head(model, tokens)
        out = losses(logits, targets, soft_ids, soft_probs)
        descend(model, opt, out[cfg.loss])
        if on_step is not None:
            on_step(step, {k: float(v.detach()) for k, v in out.items()}, time.perf_counter() - t0)
