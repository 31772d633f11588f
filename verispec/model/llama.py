"""A compact Llama-family decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU, tied embeddings).

`forward` takes n new tokens at explicit positions with an optional explicit attention mask, and reads/writes an
explicit `KVCache`. The same call serves prefill, single-token decoding, chain verification (n = k + 1) and tree
verification (positions = depth, mask = ancestry), so no decoding strategy needs its own copy of the model.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn

from . import fused, graphs, ops
from .kv_cache import KVCache
from .ops import Linear, RMSNorm


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
    attention_bias: bool = False     # biases on the q, k and v projections (Qwen2)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def __post_init__(self):
        if min(self.vocab_size, self.hidden_size, self.intermediate_size, self.num_layers, self.num_heads,
               self.num_kv_heads, self.max_position) < 1:
            raise ValueError("vocab_size, the widths, the layer and head counts and the context must be >= 1")
        if not (0 < self.rope_theta < math.inf and 0 < self.rms_eps < math.inf):
            raise ValueError(f"rope_theta and rms_norm_eps must be > 0 and finite, got {self.rope_theta} and "
                             f"{self.rms_eps}")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError("hidden_size must divide by num_heads, and num_heads by num_kv_heads")
        if self.head_tokens and (self.tie_embeddings or self.head_tokens > self.vocab_size):
            raise ValueError("a reduced output head needs untied embeddings and head_tokens <= vocab_size")

    # Hugging Face `config.json` <-> LlamaConfig
    _HF = {"vocab_size": "vocab_size", "hidden_size": "hidden_size", "intermediate_size": "intermediate_size",
           "num_layers": "num_hidden_layers", "num_heads": "num_attention_heads",
           "num_kv_heads": "num_key_value_heads", "rope_theta": "rope_theta", "rms_eps": "rms_norm_eps",
           "max_position": "max_position_embeddings", "tie_embeddings": "tie_word_embeddings",
           "head_tokens": "verispec_head_tokens", "embed_from_target": "verispec_embed_from_target",
           "attention_bias": "attention_bias"}

    @classmethod
    def from_hf(cls, hf: dict) -> "LlamaConfig":
        kind = hf.get("model_type", "llama")
        if kind not in ("llama", "qwen2"):
            raise ValueError(f"unsupported model_type {kind!r}: only Llama and Qwen2 models")
        if kind == "qwen2":                     # Qwen2: biases on q, k and v, always
            hf = {**hf, "attention_bias": True}
        unsupported = [name for name, there in (
            ("rope_scaling", hf.get("rope_scaling") or (hf.get("rope_parameters") or {}).get("rope_type", "default")
             not in ("default", None)),
            (f"hidden_act {hf.get('hidden_act')!r}", hf.get("hidden_act", "silu") != "silu"),
            ("mlp_bias", bool(hf.get("mlp_bias"))),
            ("use_sliding_window", bool(hf.get("use_sliding_window"))),
            (f"head_dim {hf.get('head_dim')} (not hidden_size / num_attention_heads)",
             hf.get("head_dim") not in (None, hf.get("hidden_size", 0) // max(1, hf.get("num_attention_heads", 1)))))
            if there]
        if unsupported:                         # loading would run another model than the file's, silently
            raise ValueError(f"this model uses what verispec does not implement: {', '.join(unsupported)}")
        rope = hf.get("rope_parameters") or {}
        hf = {**hf, "rope_theta": hf.get("rope_theta", rope.get("rope_theta", 10000.0))}
        if hf.get("num_key_value_heads") is None:
            hf["num_key_value_heads"] = hf["num_attention_heads"]
        known = {f.name for f in fields(cls)}
        return cls(**{ours: _typed(theirs, hf[theirs], type(getattr(cls, ours))) for ours, theirs in cls._HF.items()
                      if ours in known and theirs in hf})

    def to_hf(self) -> dict:
        kind = ("qwen2", "Qwen2ForCausalLM") if self.attention_bias else ("llama", "LlamaForCausalLM")
        return {"model_type": kind[0], "architectures": [kind[1]], "hidden_act": "silu",
                "head_dim": self.head_dim, **{theirs: asdict(self)[ours] for ours, theirs in self._HF.items()}}

    def to_json(self) -> str:
        return json.dumps(self.to_hf(), indent=2)


def _typed(key: str, value, kind: type):
    """A config.json value as the field's type, where it is one: "false" is no bool, 4.9 heads no integer."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is bool and not isinstance(value, bool):
        raise ValueError(f"{key} must be true or false, got {value!r}")
    if kind is int and not (number and (isinstance(value, int) or value.is_integer())):
        raise ValueError(f"{key} must be an integer, got {value!r}")
    if kind is float and not number:
        raise ValueError(f"{key} must be a number, got {value!r}")
    return kind(value)


def rotary(cos: torch.Tensor, sin: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [batch, n, d/2] -> the rotate-half RoPE factors [batch, 1, n, d] in `dtype`: q * cos + roll(q, d/2) *
    sin rotates q (rotate_half(q) * sin == roll(q, d/2) * sin with sin's first half negated)."""
    return torch.cat((cos, cos), -1)[:, None].to(dtype), torch.cat((-sin, sin), -1)[:, None].to(dtype)


def _whole_mask(mask, cache: KVCache) -> torch.Tensor | None:
    """A pass's mask over its last w slots ([..., n, w], or a `RowPlan`'s; None: causal) spelled out over every
    slot of `cache` up to the pass's own, on the cache's device (what a fixed-shape pass reads)."""
    if isinstance(mask, ops.RowPlan):
        mask = mask.mask
    if mask is None:
        return None
    width = cache.length + mask.shape[-2]
    mask = mask.to(cache.k.device)
    if mask.shape[-1] == width:
        return mask
    return torch.cat([mask.new_ones(*mask.shape[:-1], width - mask.shape[-1]), mask], -1)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.h, self.hkv, self.d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.wqkv = Linear(cfg.hidden_size, (self.h + 2 * self.hkv) * self.d, bias=cfg.attention_bias)  # q, k, v
        self.wo = Linear(self.h * self.d, cfg.hidden_size, bias=False)

    def forward(self, x, rope, rows: ops.Rows | None, layer: int):
        b, t, _ = x.shape                                       # x: [batch, n, D]
        qkv = self.wqkv(x)                                      # [batch, n, (h + 2 kv_heads) d]
        cos, sin = rope                                         # [batch, n, d/2] fp32 each
        if rows is not None and rows.kernels and ops.invariant(qkv) and qkv.dtype == torch.float32:  # kernels
            y = ops.attend(qkv.view(b * t, -1), cos.reshape(b * t, -1), sin.reshape(b * t, -1), rows, layer, self.h,
                           self.wqkv.act_bf16)                  # bf16a: its attention on pair products too
            return self.wo(y.view(b, t, self.h * self.d))
        qkv = qkv.view(b, t, self.h + 2 * self.hkv, self.d).transpose(1, 2)             # [batch, heads, n, d]
        qk, v = qkv.split((self.h + self.hkv, self.hkv), dim=1)
        # rotate-half RoPE on q and k at once: rotate_half(x) * sin == roll(x, d/2) * sin_signed
        cos, sin = rows.rotary if isinstance(rows, graphs.Dense) else rotary(cos, sin, x.dtype)   # (Dense: per pass)
        qk = qk * cos + qk.roll(self.d // 2, dims=-1) * sin      # cos, sin: [batch, 1, n, d]
        q, k = qk.split((self.h, self.hkv), dim=1)
        if rows is None:                                        # training: attend within the block only
            return self.wo(F.scaled_dot_product_attention(q, k, v, is_causal=t > 1, enable_gqa=True)
                           .transpose(1, 2).reshape(b, t, self.h * self.d))
        if isinstance(rows, graphs.Dense):                      # a fixed-shape pass (a CUDA graph)
            return self.wo(rows.attend(q, k, v, layer).to(x.dtype))
        if b > 1:                                               # one cache with a batch dimension
            rows.segments[0][0].write(layer, k, v)
        else:                                                   # one or more sequences packed end to end
            for (cache, _, _, n), k_i, v_i in zip(rows.segments, k.split(rows.sizes, 2), v.split(rows.sizes, 2)):
                cache.write(layer, k_i, v_i)
        y = ops.attend_dense(q.transpose(1, 2).reshape(b * t, self.h, self.d), rows, layer)   # [rows, h, d]
        return self.wo(y.to(x.dtype).view(b, t, self.h * self.d))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.w13 = Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)  # fused gate, up
        self.w2 = Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return self.w2(ops.silu_mul(self.w13(x, fp32=True), x.dtype))   # gate, up kept in fp32 until multiplied


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, rope, rows, layer):
        if rows is not None and rows.kernels and ops.fused(x):
            how = fused.kind(self)                       # one kernel call (not EAGLE-1's layout, nor a mixed layer)
            if how is not None:
                return (fused.layer if how == "float" else fused.qlayer)(self, x, rope, rows, layer)
        x = x + self.attn(self.attn_norm(x), rope, rows, layer)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.cfg = cfg
        # built on the meta device to be loaded into (loader.py): no random init, whose meta version imports
        # torch._dynamo (0.7 s of every command's start)
        meta = torch.empty(0).device.type == "meta"
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                  _weight=torch.empty(cfg.vocab_size, cfg.hidden_size) if meta else None)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))  # distinct blocks, not [b] * n
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.lm_head = Linear(cfg.hidden_size, cfg.head_tokens or cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed.weight             # one shared matrix
        if cfg.head_tokens:  # vocabulary ids of the head's rows
            self.register_buffer("head_ids", torch.arange(cfg.head_tokens))
        # RoPE angles stay float32 whatever the weights' dtype: a plain attribute, not a buffer.
        self._inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64, device="cpu")
                                                  / cfg.head_dim)
        self._rope = (torch.zeros(0, cfg.head_dim // 2, device="cpu"),) * 2         # cos, sin [positions, d/2]
        self._graphs = None                                     # graphs.GraphRunner, made on first use on CUDA

    def _apply(self, *args, **kwargs):
        self._graphs = None                     # graphs read the weights where they were: moved or cast, recapture
        return super()._apply(*args, **kwargs)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.weight.dtype

    def new_cache(self, capacity: int, batch: int = 1) -> KVCache:
        c = self.cfg
        if graphs.enabled(self.device):                         # room for padded rows, few distinct capacities
            capacity = graphs.capacity(capacity)
        return KVCache(c.num_layers, batch, c.num_kv_heads, capacity, c.head_dim, self.dtype, self.device)

    def rope(self, positions: torch.Tensor, grow: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [batch, n] -> cos, sin [batch, n, d/2] fp32: the rotary angles' cosines and sines.

        Each position's values come from one table computed in float64 (once, grown by doubling), so a position's
        values never depend on which other positions share the call. grow=False: the table covers the positions
        already (a fixed-shape pass: finding the largest position would wait for the device)."""
        need = int(positions.max()) + 1 if grow and positions.numel() else 0
        if need > self._rope[0].shape[0]:
            size = max(need, 2 * self._rope[0].shape[0], 256)
            angles = torch.arange(size, dtype=torch.float64, device="cpu")[:, None] * self._inv_freq  # [pos, d/2]
            self._rope = angles.cos().float().to(self.device), angles.sin().float().to(self.device)
        return tuple(t[positions.to(t.device)] for t in self._rope)

    def forward(self, tokens: torch.Tensor | None, positions: torch.Tensor, cache: KVCache | None,
                mask=None, embeds: torch.Tensor | None = None) -> torch.Tensor:
        """Run n new tokens through the model, appending their keys/values to `cache`.

        tokens, positions: [batch, n] (positions are RoPE positions; for trees they are depths, not slots).
        mask: [batch, n, cache.length + n] bool, True where a new token may attend; None means causal. A mask
        [batch, n, w] covers the last w slots only: every row sees the slots before them. An `ops.RowPlan` (batch
        1): such a mask with its rows planned once, for every pass of its shape.
        Returns the final-normed hidden states [batch, n, D]; `logits` turns them into [batch, n, vocab].
        embeds [batch, n, D], instead of tokens: input vectors fed in place of token embeddings (an EAGLE head).

        cache=None (training): the n tokens are the whole sequence, attended causally, and nothing is stored.
        With a cache, every row (a decoded token, a chain, a token tree) attends over exactly the keys it would
        see decoded alone, in the same order (`ops.Rows`), and every reduction is row-invariant (`ops`): each
        row's hidden state is bit for bit that of decoding its token alone, on the kernels' machines.
        """
        b, t = positions.shape
        if cache is not None and b == 1 and graphs.enabled(self.device) and not torch.is_grad_enabled():
            if self._graphs is None:
                self._graphs = graphs.GraphRunner(self)
            hidden = self._graphs(tokens, positions, cache, _whole_mask(mask, cache), embeds)
            if hidden is not None:
                return hidden
        x = self.embed(tokens) if embeds is None else embeds                  # [batch, n, D]
        rows = None
        if mask is None and b == 1 and cache is not None:
            mask = ops.RowPlan.chain(t)                                        # a chain's rows, planned once
        if isinstance(mask, ops.RowPlan):
            rows = mask.at(cache)
        elif cache is not None:
            masks = [None] * b if mask is None else list(mask.reshape(-1, t, mask.shape[-1]).expand(b, -1, -1))
            rows = ops.Rows.plan([(cache, i, t, m) for i, m in enumerate(masks)])
        hidden = self._run(x, positions, rows)
        if cache is not None:
            cache.advance(t)
        return hidden

    def forward_packed(self, segments: list[tuple]) -> list[torch.Tensor]:
        """One pass over several sequences' new tokens: segments [(tokens [1, n_i], positions [1, n_i], cache_i,
        mask_i or None)], as `forward` takes them. Returns each sequence's hidden states [1, n_i, D].

        Every row's result is the one `forward` gives for its sequence alone, bit for bit where the reductions
        are row-invariant (`ops.invariant`): a sequence's output never depends on which others share its batch.
        """
        if graphs.enabled(self.device):   # each sequence's own graphed pass, one after another: on a GPU several
            return [self.forward(*seg) for seg in segments]    # replays cost less than one eager pass, and each
                                                               # sequence's rows are its lone pass's by construction
        sizes = [tok.shape[1] for tok, *_ in segments]
        rows = ops.Rows.plan([(c, 0, n, m) for n, (_, _, c, m) in zip(sizes, segments)])
        tokens = torch.cat([tok for tok, *_ in segments], 1)                          # [1, sum n_i]
        positions = torch.cat([pos for _, pos, *_ in segments], 1)                    # [1, sum n_i]
        hidden = self._run(self.embed(tokens), positions, rows).split(sizes, 1)
        for (_, _, c, _), n in zip(segments, sizes):
            c.advance(n)
        return list(hidden)

    def _run(self, x, positions, rows) -> torch.Tensor:
        """x: [batch, n, D] input embeddings -> [batch, n, D] final-normed hidden states.

        On the row-invariant kernels activations stay fp32 between the (bf16 or fp32) weights and KV cache."""
        if rows is not None:
            rows.kernels = self.cfg.head_dim % 8 == 0 and self.cfg.hidden_size % 8 == 0 \
                and self.cfg.intermediate_size % 8 == 0
        if ops.invariant(x):
            x = x.float()
        rope = self.rope(positions)
        if rows is not None and rows.kernels and ops.fused(x):
            y = fused.stack(self.layers, Block, x, rope, rows, self.norm)       # every layer and the final
            if y is not None:                                                      # norm in one kernel call
                return y
        for i, block in enumerate(self.layers):
            x = block(x, rope, rows, i)
        return self.norm(x)

    def run_dense(self, x: torch.Tensor, positions: torch.Tensor, rows: graphs.Dense) -> torch.Tensor:
        """`_run` for a fixed-shape pass (`graphs`): x [1, R, D] -> [1, R, D], with no host synchronisation."""
        rope = self.rope(positions, grow=False)                 # cos, sin [1, R, d/2]: the table is whole already
        rows.prepare(rotary(*rope, x.dtype), self.cfg.num_heads // self.cfg.num_kv_heads)
        for i, block in enumerate(self.layers):
            x = block(x, rope, rows, i)
        return self.norm(x)

    def output_rows(self, ids: torch.Tensor) -> torch.Tensor:
        """[H] token ids -> [H, D]: their rows of the output head, what Medusa and EAGLE heads project onto. Tied:
        the embedding's; untied: the head's own (a quantized head's exact fp32 dequantization)."""
        if self.cfg.head_tokens:
            raise ValueError("a reduced output head has rows for its own tokens only")
        if self.cfg.tie_embeddings:
            return self.embed.weight[ids]
        if self.lm_head.quant:
            from . import quant
            (part,) = self.lm_head.quant                                  # one stored matrix
            return quant.embed(part, ids)
        return self.lm_head.weight[ids]

    def logits(self, hidden: torch.Tensor, full: bool = True) -> torch.Tensor:
        """[..., D] hidden states -> [..., vocab] float32 logits.

        With a reduced head, tokens outside it get -inf (probability 0); full=False returns the head's own
        [..., head_tokens] logits instead (for training).
        """
        out = self.lm_head(hidden, fp32=True)
        if not self.cfg.head_tokens or not full:
            return out
        wide = out.new_full((*out.shape[:-1], self.cfg.vocab_size), float("-inf"))
        return wide.scatter_(-1, self.head_ids.expand(*out.shape[:-1], -1), out)
