"""Self-distillation data, read back for training: sequences with soft targets at every answer position."""
from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import VerispecError

HELD_OUT_PERCENT = 3


@dataclass
class Example:
    id: str
    category: str
    tokens: torch.Tensor       # [n] int64: (the end of) the prompt, then the answer
    first: int                 # tokens[first + t] is answer token t; position first + t - 1 predicts it
    topk_ids: torch.Tensor     # [answer length, K] int64: target's most likely tokens for answer position t
    topk_probs: torch.Tensor   # [answer length, K] float32: their probabilities (temperature 1)
    shard: str = ""            # the distill-data file it came from (shard_name), where it came from one


def held_out(example_id: str) -> bool:
    """~3% of the training prompts, kept aside to watch alpha during training (the dev split is not here)."""
    return int(hashlib.sha256(("held-" + example_id).encode()).hexdigest(), 16) % 100 < HELD_OUT_PERCENT


def split_held_out(examples: list[Example], eval_examples: int, source: str,
                   max_train: int | None = None) -> tuple[list[Example], list[Example]]:
    """Training answers (at most max_train) and up to eval_examples held-out ones; tiny sets keep one aside."""
    train = [e for e in examples if not held_out(e.id)][:max_train]
    held = [e for e in examples if held_out(e.id)][:eval_examples]
    if not held and len(train) > 1:
        held = [train.pop()]
    if not train or not held:
        raise VerispecError(f"{source} has too few examples to train and hold some out")
    return train, held


def row_index(ids: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """[vocab] -> row of each token in a reduced head listing `ids` (-1 if absent); None: the whole vocabulary."""
    index = torch.full((vocab_size,), -1, dtype=torch.long)
    ids = torch.arange(vocab_size) if ids is None else ids
    index[ids] = torch.arange(len(ids))
    return index


SHARDS = "shard-*.pt"       # distill-data's files in its folder, one per batch of the plan


def shard_name(batch: int) -> str:
    return f"shard-{batch:05d}.pt"


def load_examples(folder: str | Path, max_tokens: int = 320) -> list[Example]:
    """Every answered prompt in a distill-data folder; prompts are cut from the left to fit `max_tokens`."""
    shards = sorted(Path(folder).glob(SHARDS))
    if not shards:
        raise VerispecError(f"no shard-*.pt files in {folder}: run `verispec distill-data` first")
    out = []
    for shard in shards:
        try:
            d = torch.load(shard, weights_only=True)
            for i, answer in enumerate(d["answers"]):
                if len(answer) < 2:
                    continue
                answer = answer[:max_tokens - 8]
                prompt = d["prompts"][i][-(max_tokens - len(answer)):]
                out.append(Example(d["ids"][i], d["categories"][i], torch.tensor(prompt + answer), len(prompt),
                                   d["topk_ids"][i][:len(answer)].long(), d["topk_probs"][i][:len(answer)].float(),
                                   shard.name))
        except Exception as e:         # a damaged file, or one of another shape: torch and indexing raise many kinds
            raise VerispecError(f"cannot read {shard}: {type(e).__name__} {e}; not a shard distill-data "
                                "wrote") from None
    return out


def frequent_tokens(examples: list[Example], n: int, always: set[int]) -> torch.Tensor:
    """The n tokens most often produced by the target (answers and their soft targets), plus `always`; where the
    answers hold fewer than n, then the prompts' most frequent tokens (code answers reuse the prompt's names)."""
    counts, prompts = Counter(), Counter()
    for ex in examples:
        counts.update(ex.tokens[ex.first:].tolist())
        counts.update(ex.topk_ids[:, :4].flatten().tolist())
        prompts.update(ex.tokens[:ex.first].tolist())
    chosen = list(dict.fromkeys([*always, *(t for t, _ in counts.most_common()),
                                 *(t for t, _ in prompts.most_common())]))
    return torch.tensor(sorted(chosen[:n]))


def batches(examples: list[Example], tokens_per_batch: int, seed: int, epoch: int) -> list[list[int]]:
    """Deterministic batches for an epoch: shuffle, then group neighbours of similar length."""
    g = torch.Generator().manual_seed(seed * 7919 + epoch)
    order = torch.randperm(len(examples), generator=g).tolist()
    out = []
    for start in range(0, len(order), 256):  # sort windows of 256 by length: little padding, still shuffled
        window = sorted(order[start:start + 256], key=lambda i: len(examples[i].tokens))
        batch, longest = [], 0
        for i in window:
            n = len(examples[i].tokens)
            if batch and max(longest, n) * (len(batch) + 1) > tokens_per_batch:
                out.append(batch)
                batch, longest = [], 0
            batch.append(i)
            longest = max(longest, n)
        if batch:
            out.append(batch)
    perm = torch.randperm(len(out), generator=g).tolist()
    return [out[i] for i in perm]


def collate(examples: list[Example], head_index: torch.Tensor):
    """Right-pad a batch. head_index: [vocab] -> row in the reduced head, or -1 if the head lacks the token.

    Returns tokens [B, L], targets (next token's head row or -1) [B, L], soft ids [B, L, K] (head rows, -1 for
    none) and soft probs [B, L, K]; positions outside the answer carry -1 / 0 and are ignored by the losses.
    """
    length = max(len(e.tokens) for e in examples)
    k = examples[0].topk_ids.shape[1]
    b = len(examples)
    tokens = torch.zeros(b, length, dtype=torch.long)
    targets = torch.full((b, length), -1, dtype=torch.long)
    soft_ids = torch.full((b, length, k), -1, dtype=torch.long)
    soft_probs = torch.zeros(b, length, k)
    for r, e in enumerate(examples):
        n, a = len(e.tokens), e.first
        tokens[r, :n] = e.tokens
        targets[r, a - 1:n - 1] = head_index[e.tokens[a:]]
        soft_ids[r, a - 1:n - 1] = head_index[e.topk_ids]
        soft_probs[r, a - 1:n - 1] = e.topk_probs
    soft_probs = soft_probs.masked_fill(soft_ids < 0, 0.0)
    return tokens, targets, soft_ids, soft_probs
