"""Which keys each row of a pass attends to (`Rows`), planned from the pass's masks, and the cache's stores of
laid-out chunks those keys are read from (`store_kind`)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .. import kernels

CHUNK = 128             # attention's split-KV chunk, in logical key positions (part of the numerics)


@dataclass
class Rows:
    """Which keys each new row of a pass attends to: row r, of segment seq[r], sees slots [0, ctx[r]) of its
    segment's cache and then slots extra[r, :n_extra[r]], in that order: exactly the keys, in the order, that it
    would see decoded alone (a chain row: the context and the rows before it; a tree row: the context and its
    ancestors). A segment is one sequence: (cache, batch index); a pass may hold several (a packed batch)."""
    seq: torch.Tensor          # [R] int64
    slot: torch.Tensor         # [R] int64: the cache slot row r's own key and value go to
    ctx: torch.Tensor          # [R] int64
    extra: torch.Tensor        # [R, E] int64 slots (padding past n_extra)
    n_extra: torch.Tensor      # [R] int64
    segments: list             # [(cache, batch index, start, n rows)]
    kernels: bool = True       # the model's shapes suit the kernels (head size, widths multiples of 8)

    @property
    def sizes(self) -> list[int]:
        return [n for *_, n in self.segments]

    def caches(self, layer: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Each segment's keys and values of `layer`: two lists of [kv_heads, capacity, d]."""
        kv = [c.sequence(layer, b) for c, b, _, _ in self.segments]
        return [k for k, _ in kv], [v for _, v in kv]

    def stores(self, pairs: bool) -> tuple:
        """The kernels' arguments for laid-out chunks of bf16 caches on the CPU (`store_kind`): each segment's
        cache's whole store (`KVCache.panels`), [layers, batch, ...], and its flags; () where there are none (so
        builds from before them run every dtype but bf16a, scripts/kernels_ab.py). pairs: bf16a's attention."""
        caches = [c for c, *_ in self.segments]
        kinds = {store_kind(c.k.dtype, c.k.device, c.k.shape[-1], pairs) for c in caches}
        kind = kinds.pop() if len(kinds) == 1 else None
        if kind is None:
            return ()
        made = [c.panels(CHUNK, kind) for c in caches]
        return [p for p, _ in made], [f for _, f in made]

    def panels(self, layer: int, pairs: bool) -> tuple:
        """`stores`, each segment's entry of `layer`."""
        stores = self.stores(pairs)
        if not stores:
            return ()
        entries = [(layer, b) for _, b, *_ in self.segments]
        return tuple([t[i][b] for t, (i, b) in zip(whole, entries)] for whole in stores)

    @classmethod
    def plan(cls, segments: list[tuple]) -> "Rows":
        """segments: [(cache, batch index, n new rows, mask or None)]. mask [n, w] bool: which of the last w slots
        (the pass's own n and the w - n before them) each row sees; every row sees every slot before those (so
        [n, start + n] spells out the whole cache). None: causal, a chain. A `RowPlan`: such a mask, planned."""
        seq, slot, ctx, extras, counts, segs = [], [], [], [], [], []
        for s, (cache, b, n, mask) in enumerate(segments):
            start = cache.length
            cache.stale(start)                                  # slots a failed pass may have written
            segs.append((cache, b, start, n))
            seq.append(torch.full((n,), s, dtype=torch.long))
            slot.append(torch.arange(start, start + n))
            plan = mask if isinstance(mask, RowPlan) else RowPlan.chain(n) if mask is None else RowPlan(n, mask)
            c, e, count = plan.placed(start)
            ctx.append(c)
            extras.append(e)
            counts.append(count)
        width = max((e.shape[1] for e in extras), default=0)
        extra = torch.cat([F.pad(e, (0, width - e.shape[1])) for e in extras]) if extras else torch.zeros(0, 0)
        return cls(torch.cat(seq), torch.cat(slot), torch.cat(ctx), extra.long().contiguous(), torch.cat(counts), segs)


def _seen(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mask [n, w] bool -> each row's ctx [n], extra [n, E] and n_extra [n] (`Rows`), counted from the mask's first
    slot: the slots every row sees from there, then its own, ascending."""
    n = mask.shape[0]
    lead = int(mask.all(0).long().cumprod(0).sum())             # leading slots every row sees
    cols = mask[:, lead:]                                        # [n, w - lead]
    count = cols.sum(1)
    order = torch.argsort((~cols).to(torch.int8), dim=1, stable=True)       # visible slots first, ascending
    return torch.full((n,), lead, dtype=torch.long), order[:, :int(count.max()) if n else 0] + lead, count


_CHAINS: dict[int, "RowPlan"] = {}


class RowPlan:
    """One sequence's `Rows` for passes of one shape (a draft tree's depth, a chain of n rows), planned once and
    placed after the cache's length at each pass (`at`): the same Rows as `Rows.plan`'s, without planning again.
    mask [n, w] bool as `Rows.plan` takes it (the last w slots; every row sees the slots before them), or None: a
    chain."""

    def __init__(self, n: int, mask: torch.Tensor | None = None):
        self.n, self.mask, self.seq, self.slot = n, mask, torch.zeros(n, dtype=torch.long), torch.arange(n)
        if mask is None:                                        # relative to the pass's first slot
            self.back, self.ctx = 0, torch.arange(1, n + 1)
            self.extra, self.count = torch.zeros(n, 0, dtype=torch.long), torch.zeros(n, dtype=torch.long)
        else:                                                   # relative to the first slot the mask covers
            mask = mask.reshape(n, -1).cpu()
            self.back = mask.shape[1] - n
            self.ctx, extra, self.count = _seen(mask)
            self.extra = extra.long().contiguous()

    @classmethod
    def chain(cls, n: int) -> "RowPlan":
        """The plan of a chain of n rows (made once per n up to 64: decoding steps, drafts, verified chains)."""
        plan = _CHAINS.get(n)
        if plan is None:
            plan = cls(n)
            if n <= 64:
                _CHAINS[n] = plan
        return plan

    def placed(self, start: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Its rows' ctx [n], extra [n, E] and n_extra [n] for a pass after `start` cached slots."""
        if start < self.back:
            raise ValueError(f"a pass whose mask covers {self.back} slots before its own, after {start}")
        base = start - self.back
        return self.ctx + base, self.extra + base, self.count

    def at(self, cache, b: int = 0) -> "Rows":
        """The pass's Rows over batch entry b of `cache`, from its length on: `Rows.plan`'s for this one segment."""
        start = cache.length
        ctx, extra, count = self.placed(start)
        cache.stale(start)                                      # slots a failed pass may have written
        return Rows(self.seq, self.slot + start, ctx, extra, count, [(cache, b, start, self.n)])


def store_kind(dtype: torch.dtype, device: torch.device, head_dim: int, pairs: bool) -> str | None:
    """How attention over a cache of `dtype` keys on `device` keeps its full chunks laid out (`KVCache.panels`), or
    None: "pairs" for bf16a's pair products (kernels/attention_pairs.h), "tiles" where bf16 attention runs on
    AMX-BF16 tiles (kernels/aamx.h: its packed keys, then values); either way reading the store gives the bits of
    laying the chunk out afresh."""
    if dtype != torch.bfloat16 or torch.device(device).type != "cpu":
        return None
    if pairs:
        return "pairs" if CHUNK % 16 == 0 and head_dim % 16 == 0 else None
    return "tiles" if CHUNK % 32 == 0 and head_dim % 32 == 0 and kernels.bf16_on_amx() else None


def kv_bytes_per_token(model) -> int:
    """Keys and values of one token over all of `model`'s layers; twice that where its caches also keep their chunks
    laid out (`KVCache.panels`: bf16a, or bf16 attention on AMX tiles, on the CPU, float layers or quantized)."""
    c = model.cfg
    kv = 2 * c.num_layers * c.num_kv_heads * c.head_dim * model.dtype.itemsize
    pairs = any(getattr(m, "act_bf16", False) for m in model.modules())
    return 2 * kv if store_kind(model.dtype, model.device, c.head_dim, pairs) else kv
