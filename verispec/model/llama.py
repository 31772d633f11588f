"""A compact Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU, tied embeddings).

`forward` takes n new tokens at explicit positions with an optional explicit attention mask, and reads/writes an
explicit `KVCache`. The same call serves prefill, single-token decoding, chain verification (n = k + 1) and tree
verification (positions = depth, mask = ancestry), so no decoding strategy needs its own copy of the model.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from .kv_cache import KVCache


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int = 49152
    hidden_size: int = 576          # model width D
    intermediate_size: int = 1536   # SwiGLU inner width
    num_layers: int = 30
    num_heads: int = 9              # query heads
    num_kv_heads: int = 3           # key/value heads shared by num_heads // num_kv_heads query heads each
    rope_theta: float = 100000.0
    rms_eps: float = 1e-5
    max_position: int = 8192        # context length
    tie_embeddings: bool = True     # output head reuses the input embedding matrix
    head_tokens: int = 0            # > 0: the output head covers only this many tokens (a reduced-vocabulary
                                    # draft); every other token gets probability 0
    embed_from_target: bool = False  # a draft whose input embedding is its target's (not stored with it)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def __post_init__(self):
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
        if self.head_tokens and (self.tie_embeddings or self.head_tokens > self.vocab_size):
            raise ValueError("a reduced output head needs untied embeddings and head_tokens <= vocab_size")

    # Hugging Face `config.json` <-> LlamaConfig
    _HF = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "intermediate_size": "intermediate_size",
           "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
           "num_kv_heads": "num_key_value_heads", "rope_theta": "rope_theta", "rms_eps": "rms_norm_eps",
           "max_position": "max_position_embeddings", "tie_embeddings": "tie_word_embeddings",
           "head_tokens": "verispec_head_tokens", "embed_from_target": "verispec_embed_from_target"}

    @classmethod
    def from_hf(cls, hf: dict) -> "LlamaConfig":
        if hf.get("model_type", "llama") != "llama":
            raise ValueError(f"unsupported model_type {hf.get('model_type')!r}: only Llama-family models")
        rope = hf.get("rope_parameters") or {}
        hf = {**hf, "rope_theta": hf.get("rope_theta", rope.get("rope_theta", 10000.0))}
        if hf.get("num_key_value_heads") is None:
            hf["num_key_value_heads"] = hf["num_attention_heads"]
        known = {f.name for f in fields(cls)}
        return cls(**{ours: type(getattr(cls, ours))(hf[theirs]) for ours, theirs in cls._HF.items()
                      if ours in known and theirs in hf})

    def to_hf(self) -> dict:
        return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
                "head_dim": self.head_dim, **{theirs: asdict(self)[ours] for ours, theirs in self._HF.items()}}

    def to_json(self) -> str:
        return json.dumps(self.to_hf(), indent=2)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, self.weight.shape, self.weight, self.eps)


ROWWISE = "rowwise"     # mask sentinel: causal, computed one query row at a time (see Llama.forward)
ROWWISE_MAX_TOKENS = 32  # CPU bf16 matrix products are row-invariant up to 32 rows (tests/test_model.py)


@dataclass(frozen=True)
class RowPaths:
    """A token-tree mask, attended one row at a time: new token i sees the first `shared` slots (the context
    every row sees), then its ancestors' slots and its own, in order, laid out exactly as if its path had been
    decoded alone, so its logits are those of sequential decoding, bit for bit.

    Rows are attended in depth-first order, so each row's layout differs from the previous row's only past
    their common ancestors: `steps` holds, per row in that order, (row, path length, the copies that bring
    the layout up to date as (destination offset, source slot, run length))."""
    shared: int
    longest: int                                        # the longest path (ancestors and itself)
    steps: tuple[tuple[int, int, tuple[tuple[int, int, int], ...]], ...]
    order: torch.Tensor                                 # [n] row i's place in the depth-first order

    @classmethod
    def from_mask(cls, mask: torch.Tensor) -> "RowPaths":
        """mask: [n, S] bool, True where a new token may attend."""
        device, mask = mask.device, mask.cpu()
        shared = int(mask.all(0).long().cumprod(0).sum())               # leading slots every row sees
        paths = [(shared + row[shared:].nonzero()[:, 0]).tolist() for row in mask]
        dfs = sorted(range(len(paths)), key=lambda i: paths[i])        # ascending slots: ancestors first
        steps, held = [], []
        for i in dfs:
            path = paths[i]
            same = next((j for j, (a, b) in enumerate(zip(held, path)) if a != b), min(len(held), len(path)))
            runs = []                                                    # copy path[same:] in contiguous runs
            for off in range(same, len(path)):
                if runs and path[off] == path[off - 1] + 1:
                    runs[-1][2] += 1
                else:
                    runs.append([off, path[off], 1])
            steps.append((i, len(path), tuple(map(tuple, runs))))
            held = path
        order = torch.empty(len(paths), dtype=torch.long)
        order[torch.tensor(dfs)] = torch.arange(len(paths))
        return cls(shared, max(map(len, paths)), tuple(steps), order.to(device))


@dataclass
class Packed:
    """Several sequences' new tokens in one pass: rows [sum n_i] packed end to end, each sequence with its own
    cache and attention rule. Matrix products run over the packed rows (in blocks of up to ROWWISE_MAX_TOKENS,
    which keeps each row's result independent of its neighbours); attention runs per sequence."""
    sizes: list[int]                    # n_i, new tokens of sequence i
    caches: list[KVCache]
    masks: list                         # per sequence: None (one token), ROWWISE, RowPaths or a [1, 1, n_i, S] mask


def by_rows(fn, x: torch.Tensor) -> torch.Tensor:
    """fn over x [1, N, ...] in blocks of up to ROWWISE_MAX_TOKENS rows (fn acts on each row alone)."""
    if x.shape[1] <= ROWWISE_MAX_TOKENS:
        return fn(x)
    return torch.cat([fn(block) for block in x.split(ROWWISE_MAX_TOKENS, 1)], 1)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.h, self.hkv, self.d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.wqkv = nn.Linear(cfg.hidden_size, (self.h + 2 * self.hkv) * self.d, bias=False)  # fused q, k, v
        self.wo = nn.Linear(self.h * self.d, cfg.hidden_size, bias=False)

    def forward(self, x, cos, sin, cache: KVCache | Packed | None, layer: int, mask):
        b, t, _ = x.shape                                       # x: [batch, n, D]
        packed = isinstance(cache, Packed)
        qkv = by_rows(self.wqkv, x) if packed else self.wqkv(x)
        qkv = qkv.view(b, t, self.h + 2 * self.hkv, self.d).transpose(1, 2)      # [batch, heads, n, d]
        qk, v = qkv.split((self.h + self.hkv, self.hkv), dim=1)
        # rotate-half RoPE on q and k at once: rotate_half(x) * sin == roll(x, d/2) * sin_signed
        qk = qk * cos + qk.roll(self.d // 2, dims=-1) * sin      # cos, sin: [batch, 1, n, d]
        q, k = qk.split((self.h, self.hkv), dim=1)
        if cache is None:                                       # training: attend within the block only
            return self.wo(F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)
                           .transpose(1, 2).reshape(b, t, self.h * self.d))
        if packed:                                              # each sequence attends over its own cache
            y = torch.cat([self._attend(*qkv_i, c, layer, m) for *qkv_i, c, m in
                           zip(q.split(cache.sizes, 2), k.split(cache.sizes, 2), v.split(cache.sizes, 2),
                               cache.caches, cache.masks)], dim=2)
        else:
            y = self._attend(q, k, v, cache, layer, mask)
        y = y.transpose(1, 2).reshape(b, t, self.h * self.d)                    # y: [batch, n, h * d]
        return by_rows(self.wo, y) if packed else self.wo(y)

    def _attend(self, q, k, v, cache: KVCache, layer: int, mask) -> torch.Tensor:
        """q: [batch, h, n, d], k, v: [batch, kv_heads, n, d] of n new tokens -> [batch, h, n, d]."""
        t = q.shape[2]
        k_all, v_all = cache.write(layer, k, v)                 # [batch, kv_heads, S, d], S = length + n
        first = k_all.shape[2] - t
        if isinstance(mask, str):  # ROWWISE: row i sees exactly slots [0, S - n + i], as when decoded alone
            return torch.cat([F.scaled_dot_product_attention(q[:, :, i:i + 1], k_all[:, :, :first + i + 1],
                                                             v_all[:, :, :first + i + 1], enable_gqa=True)
                              for i in range(t)], dim=2)
        if isinstance(mask, RowPaths):  # row i sees the shared slots, then its path, laid out as if decoded alone
            b, first = q.shape[0], mask.shared
            k_row = k_all.new_empty(b, self.hkv, first + mask.longest, self.d)   # [batch, kv_heads, S_i, d]
            v_row = v_all.new_empty(b, self.hkv, first + mask.longest, self.d)
            k_row[:, :, :first], v_row[:, :, :first] = k_all[:, :, :first], v_all[:, :, :first]
            rows = []
            for i, length, copies in mask.steps:                                  # depth-first
                for off, slot, run in copies:
                    k_row.narrow(2, first + off, run).copy_(k_all.narrow(2, slot, run))
                    v_row.narrow(2, first + off, run).copy_(v_all.narrow(2, slot, run))
                end = first + length
                rows.append(F.scaled_dot_product_attention(q[:, :, i:i + 1], k_row[:, :, :end], v_row[:, :, :end],
                                                           enable_gqa=True))
            return torch.cat(rows, dim=2).index_select(2, mask.order)              # back in row order
        return F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, enable_gqa=True)


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.w13 = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)  # fused gate, up
        self.w2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache, layer, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, cache, layer, mask)
        h = self.mlp_norm(x)
        return x + (by_rows(self.mlp, h) if isinstance(cache, Packed) else self.mlp(h))


class Llama(nn.Module):
    # decode chains and trees row by row, so each row's logits are those of decoding it alone (a target); a
    # proposer whose rows need not match sequential decoding (the EAGLE head) sets it False: dense masked passes
    exact_rows = True

    @property
    def _rowwise(self) -> bool:
        """Attend chains and trees row by row: decoding with exact_rows (training takes the dense mask)."""
        return self.exact_rows and not self.training

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))  # distinct blocks, not [b] * n
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.head_tokens or cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight             # one shared matrix
        if cfg.head_tokens:  # vocabulary ids of the head's rows
            self.register_buffer("head_ids", torch.arange(cfg.head_tokens))
        # RoPE frequencies stay float32 whatever the weights' dtype: a plain attribute, not a buffer.
        self._inv_freq = (1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64, device="cpu")
                                                   / cfg.head_dim)).float()

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def new_cache(self, capacity: int, batch: int = 1) -> KVCache:
        c = self.cfg
        return KVCache(c.num_layers, batch, c.num_kv_heads, capacity, c.head_dim, self.dtype, self.device)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._inv_freq.device != positions.device:
            self._inv_freq = self._inv_freq.to(positions.device)
        angles = positions[..., None].float() * self._inv_freq  # [batch, n, d/2]
        cos, sin = angles.cos(), angles.sin()
        # sin carries rotate_half's sign: the first half multiplies -x2, the second x1
        return (torch.cat((cos, cos), -1)[:, None].to(self.dtype),          # [batch, 1, n, d]
                torch.cat((-sin, sin), -1)[:, None].to(self.dtype))

    def forward(self, tokens: torch.Tensor | None, positions: torch.Tensor, cache: KVCache | None,
                mask: torch.Tensor | None = None, embeds: torch.Tensor | None = None) -> torch.Tensor:
        """Run n new tokens through the model, appending their keys/values to `cache`.

        tokens, positions: [batch, n] (positions are RoPE positions; for trees they are depths, not slots).
        mask: [batch, n, cache.length + n] bool, True where a new token may attend; None means causal.
        Returns the final-normed hidden states [batch, n, D]; `logits` turns them into [batch, n, vocab].

        cache=None (training): the n tokens are the whole sequence, attended causally, and nothing is stored.
        A causal block of up to ROWWISE_MAX_TOKENS tokens (a verified chain) is attended one row at a time, so
        each row's attention is exactly that of decoding the token alone. With row-invariant matrix products
        (CPU bf16, prepacked) speculative and plain decoding then produce bitwise-equal logits; elsewhere they
        differ only by the matrix products' rounding (~1e-5 relative in fp32). An explicit mask (a token tree) is
        attended row by row too, each row over its own path (RowPaths), in blocks of up to ROWWISE_MAX_TOKENS rows.
        embeds [batch, n, D], instead of tokens: input vectors fed in place of token embeddings (an EAGLE head).
        """
        b, t = positions.shape
        if self._rowwise and mask is not None and cache is not None and b == 1 and t > ROWWISE_MAX_TOKENS:
            full = mask.view(t, cache.length + t)
            if not full[:, cache.length:].triu(1).any():
                # no row attends to a later one (a tree, breadth-first): run blocks of rows one after the
                # other, each block reading the keys the earlier ones cached, so every block stays row-invariant
                base, out = cache.length, []
                for s in range(0, t, ROWWISE_MAX_TOKENS):
                    e = min(t, s + ROWWISE_MAX_TOKENS)
                    out.append(self.forward(None if tokens is None else tokens[:, s:e], positions[:, s:e], cache,
                                            full[s:e, :base + e], None if embeds is None else embeds[:, s:e]))
                return torch.cat(out, 1)
        x = self.embed(tokens) if embeds is None else embeds                  # [batch, n, D]
        hidden = self._run(x, positions, cache, self._attention_rule(b, t, cache, mask))
        if cache is not None:
            cache.advance(t)
        return hidden

    def forward_packed(self, segments: list[tuple]) -> list[torch.Tensor]:
        """One pass over several sequences' new tokens: segments [(tokens [1, n_i], positions [1, n_i], cache_i,
        mask_i or None)], as `forward` takes them. Returns each sequence's hidden states [1, n_i, D].

        Every row's result is the one `forward` gives for its sequence alone, bit for bit where matrix products
        are row-invariant (CPU bf16): a sequence's output never depends on which others share its batch.
        A segment of more than ROWWISE_MAX_TOKENS tokens runs alone, as `forward` would run it.
        """
        big = [i for i, (tok, *_) in enumerate(segments) if tok.shape[1] > ROWWISE_MAX_TOKENS]  # these run alone
        rest = [i for i in range(len(segments)) if i not in big]
        out = {i: self.forward(*segments[i]) for i in big}
        if len(rest) == 1:
            out[rest[0]] = self.forward(*segments[rest[0]])
        elif rest:
            group = [segments[i] for i in rest]
            sizes = [tok.shape[1] for tok, *_ in group]
            packed = Packed(sizes, [c for _, _, c, _ in group],
                            [self._attention_rule(1, n, c, m) for n, (_, _, c, m) in zip(sizes, group)])
            tokens = torch.cat([tok for tok, *_ in group], 1)                          # [1, sum n_i]
            positions = torch.cat([pos for _, pos, *_ in group], 1)                    # [1, sum n_i]
            hidden = self._run(self.embed(tokens), positions, packed, None).split(sizes, 1)
            for i, h, c, n in zip(rest, hidden, packed.caches, sizes):
                c.advance(n)
                out[i] = h
        return [out[i] for i in range(len(segments))]

    def _attention_rule(self, b: int, t: int, cache: KVCache | None, mask: torch.Tensor | None):
        """How t new tokens attend: None (one token, or training), ROWWISE (a causal chain, row by row),
        RowPaths (a tree of one sequence, row by row over each path) or a [batch or 1, 1, n, S] bool mask."""
        if cache is None:
            return None
        exact = self._rowwise
        if mask is None:
            if t == 1:
                return None
            if exact and t <= ROWWISE_MAX_TOKENS:
                return ROWWISE
            rows = torch.arange(t, device=cache.k.device)[:, None] + cache.length  # token i sees slots <= its own
            mask = torch.arange(cache.length + t, device=cache.k.device)[None, :] <= rows          # [n, S]
        elif exact and b == 1 and t <= ROWWISE_MAX_TOKENS:
            return RowPaths.from_mask(mask.view(t, cache.length + t))
        return mask.view(-1, 1, t, cache.length + t)

    def _run(self, x, positions, cache, mask) -> torch.Tensor:
        """x: [batch, n, D] input embeddings -> [batch, n, D] final-normed hidden states."""
        cos, sin = self.rope(positions)
        for i, block in enumerate(self.layers):
            x = block(x, cos, sin, cache, i, mask)
        return self.norm(x)

    def logits(self, hidden: torch.Tensor, full: bool = True) -> torch.Tensor:
        """[..., D] hidden states -> [..., vocab] float32 logits.

        With a reduced head, tokens outside it get -inf (probability 0); full=False returns the head's own
        [..., head_tokens] logits instead (for training).
        """
        if full:  # decoding (a big tree, a batch): blocks of rows keep every row's result row-invariant
            rows = hidden.reshape(1, -1, hidden.shape[-1])                         # [1, rows, D]
            out = by_rows(self.lm_head, rows).view(*hidden.shape[:-1], -1)
        else:
            out = self.lm_head(hidden)
        out = out.float()
        if not self.cfg.head_tokens or not full:
            return out
        wide = out.new_full((*out.shape[:-1], self.cfg.vocab_size), float("-inf"))
        return wide.scatter_(-1, self.head_ids.expand(*out.shape[:-1], -1), out)
