"""Fixed-shape passes, captured as CUDA graphs: a decode step, a chain and a token tree all replay one graph.

On a GPU a small model's pass is launch-bound: the default 135M model's 30 layers are about 900 small kernels,
and launching them one by one from Python cost 20-45 ms a token on an H200 whatever the number of rows (session
33). A graph launches them
all at once, but only for fixed shapes and fixed memory. So a pass of n rows is padded to a row bucket R (`BUCKETS`),
and attention runs over every slot of the cache (its capacity C) under a mask [R, C] filled before each replay: a
pass then has the same shapes at every cache length, and one graph per (cache, R) serves a whole generation.

Padded rows carry token 0 at position 0 and see only the keys a causal row there would; real rows never see them.
Their keys and values land in cache slots past the sequence, which nothing reads before they are overwritten
(`KVCache`: slots past `length` are stale). `Llama.new_cache` leaves room for the largest bucket.

A row's bits depend on its own inputs only when every pass has the same shapes (the same GEMM and attention
kernels): with one bucket for decode steps, chains and trees up to 16 rows, plain decoding and verification share
the kernels; chains of more rows, and trees (whose ancestors sit at other slots than in plain decoding), are exact
in distribution, and `scripts/cuda_check.py` measures how often greedy output still matches.
"""
from __future__ import annotations

import os
import weakref

import torch
import torch.nn.functional as F

BUCKETS = (16, 32, 64, 128)     # rows per pass; more rows (a long prefill) run eagerly
ROOM = BUCKETS[-1]              # slots a cache keeps past its last token for padded rows
ROUND = 512                     # cache capacities are rounded up to this (fewer distinct graphs)
TABLE = 1 << 16                 # RoPE positions tabled at least (16 MB for the default model)
TABLE_MAX = 1 << 18             # and at most, whatever context a file claims (later positions run eagerly)


_everywhere = [False]           # tests: fixed-shape passes on the CPU too, uncaptured


def enabled(device: torch.device) -> bool:
    """Whether passes on `device` are fixed-shape, replayed CUDA graphs (CUDA, unless VERISPEC_CUDA_GRAPHS=0)."""
    return (device.type == "cuda" or _everywhere[0]) and os.environ.get("VERISPEC_CUDA_GRAPHS", "1") != "0"


def capacity(n: int) -> int:
    """The capacity a cache for n slots gets on a graphed device: room for the largest bucket, rounded up."""
    return -(-(n + ROOM) // ROUND) * ROUND


def bucket(n: int) -> int | None:
    return next((b for b in BUCKETS if n <= b), None)


class Dense:
    """The rows of a fixed-shape pass: row r's key and value go to cache slot slots[r], and row r attends to the
    slots where mask[r] is True (PyTorch's attention over the whole cache)."""
    kernels = False                                                  # never verispec's CPU kernels

    def __init__(self, layers: list, slots: torch.Tensor, mask: torch.Tensor):
        self.layers, self.slots, self.mask = layers, slots, mask    # a cache's (k, v) per layer (`KVCache.layers`);
                                                                    # slots [R] int64; mask [1, 1, R, C] bool
        self.rotary = self.bias = None

    def prepare(self, rotary: tuple[torch.Tensor, torch.Tensor], groups: int) -> None:
        """What every layer shares, made once per pass: the rotary factors (`llama.rotary`: [1, 1, R, d] each), and
        the mask as an additive bias over the rows of `groups` query heads per key head, [1, 1, groups * R, C]
        (row g * R + r: query head g of row r)."""
        self.rotary = rotary
        bias = torch.zeros(self.mask.shape, dtype=rotary[0].dtype, device=self.mask.device)
        self.bias = bias.masked_fill_(~self.mask, float("-inf")).repeat(1, 1, groups, 1)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
        """q [1, H, R, d], k, v [1, kv_heads, R, d] (after RoPE) -> [1, R, H * d]. The query heads that share a key
        head attend as rows of one head: no copy of the keys per query head."""
        kc, vc = self.layers[layer]                                  # [1, kv_heads, C, d]
        kc.index_copy_(2, self.slots, k)
        vc.index_copy_(2, self.slots, v)
        b, h, r, d = q.shape
        q = q.reshape(b, kc.shape[1], h // kc.shape[1] * r, d)      # [1, kv_heads, G * R, d]
        y = F.scaled_dot_product_attention(q, kc, vc, attn_mask=self.bias)          # [1, kv_heads, G * R, d]
        return y.reshape(b, h, r, d).transpose(1, 2).reshape(b, r, h * d)


class _Pass:
    """One (cache, bucket) pass: static inputs, the captured graph (or none: `GraphRunner(capture=False)`) and its
    output."""

    def __init__(self, model, cache, rows: int, embeds: bool, capture: bool, pool):
        dev, c = model.device, cache.capacity
        # the cache's tensors, not the cache: GraphRunner's table forgets a pass when its cache is gone
        self.model, self.layers, self.rows = model, cache.layers, rows     # model: a weak proxy (GraphRunner)
        self.tokens = torch.zeros(1, rows, dtype=torch.long, device=dev)                       # [1, R]
        self.embeds = torch.zeros(1, rows, model.cfg.hidden_size, dtype=model.dtype, device=dev) if embeds else None
        self.positions = torch.zeros(1, rows, dtype=torch.long, device=dev)                    # [1, R]
        self.slots = torch.zeros(rows, dtype=torch.long, device=dev)                           # [R]
        self.mask = torch.zeros(1, 1, rows, c, dtype=torch.bool, device=dev)                   # [1, 1, R, C]
        self.cols = torch.arange(c, device=dev)                                                # [C]
        self.row = torch.arange(rows, device=dev)                                              # [R]
        self.graph, self.out = None, None
        self.capture, self.pool = capture, pool

    def _body(self) -> torch.Tensor:
        x = self.model.embed(self.tokens) if self.embeds is None else self.embeds             # [1, R, D]
        return self.model.run_dense(x, self.positions, Dense(self.layers, self.slots, self.mask))

    def load(self, tokens, embeds, positions, mask, start: int) -> None:
        """Fill the static inputs for n real rows starting at cache slot `start`; mask [n, start + n] or None."""
        n = positions.shape[1]
        if self.embeds is None:
            self.tokens[:, :n].copy_(tokens)
            self.tokens[:, n:].zero_()
        else:
            self.embeds[:, :n].copy_(embeds)
            self.embeds[:, n:].zero_()
        self.positions[:, :n].copy_(positions)
        self.positions[:, n:].zero_()
        torch.add(self.row, start, out=self.slots)                                              # [R]
        m = self.mask[0, 0]                                                                     # [R, C]
        torch.le(self.cols[None], self.slots[:, None], out=m)             # causal: row r sees slots <= start + r
        if mask is not None:
            m[:n].zero_()
            m[:n, :start + n].copy_(mask)

    def run(self) -> torch.Tensor:
        """The pass over the loaded inputs -> its output [1, R, D] (static: valid until the next run)."""
        if not self.capture:
            return self._body()
        if self.graph is None:                     # (warm-up writes the same keys and values as the replay will)
            self.graph, self.out = capture(self._body, self.pool)
        self.graph.replay()
        return self.out


def capture(body, pool):
    """body() captured as a CUDA graph in memory pool `pool` -> (graph, its output, static: valid until the next
    replay). PyTorch's recipe: two warm-up runs on a side stream first (first-use allocations and lazy set-up stay
    out of the graph)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            body()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = body()
    return graph, out


class GraphRunner:
    """A model's fixed-shape passes, one per (cache, row bucket, input kind), captured on first use."""

    def __init__(self, model, capture: bool | None = None):
        self.model = weakref.proxy(model)       # the model holds its runner: no cycle keeping GPU memory alive
        self.capture = model.device.type == "cuda" if capture is None else capture
        # cache -> {(R, embeds): _Pass, "pool": the memory pool its graphs share}. A pool lives and dies with its
        # cache's graphs: PyTorch cannot capture into a pool whose graphs have all been freed
        self.passes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        # the RoPE table for every position a pass may use, now (graphs read it where it is; a draft may be asked
        # for positions past its own context, so past max_position too)
        model.rope(torch.tensor([[min(max(model.cfg.max_position, TABLE), TABLE_MAX) - 1]]))
        self.table = model._rope[0]

    def __call__(self, tokens, positions, cache, mask, embeds) -> torch.Tensor | None:
        """`Llama.forward` for batch 1 as a fixed-shape pass -> hidden [1, n, D]; None where it does not fit (too
        many rows, no room in the cache): the caller runs it eagerly."""
        n, start = positions.shape[1], cache.length
        cache.stale(start)                               # (a CPU cache's laid-out chunks: the pass writes from start)
        rows = bucket(n)
        if rows is None or start + rows > cache.capacity or cache.k.shape[1] != 1 or start + n > len(self.table):
            return None
        if self.model._rope[0] is not self.table:        # an eager pass grew the table: the graphs read the old one
            self.passes.clear()
            self.table = self.model._rope[0]
        table = self.passes.get(cache)
        if table is None:
            table = self.passes[cache] = {"pool": torch.cuda.graph_pool_handle() if self.capture else None}
        key = (rows, embeds is not None)
        if key not in table:
            table[key] = _Pass(self.model, cache, rows, embeds is not None, self.capture, table["pool"])
        step = table[key]
        step.load(tokens, embeds, positions, None if mask is None else mask.reshape(n, start + n), start)
        out = step.run()[:, :n].clone()                                         # [1, n, D], ours to keep
        cache.advance(n)
        return out
