"""Convert a Llama or Qwen2 GGUF file into a Hugging Face-style model folder, once.

The folder holds `model.safetensors` (dequantized fp32, HF tensor names), `config.json`, `tokenizer.json` and
`tokenizer_config.json` (with the chat template), so both verispec and `transformers` can load it.
llama.cpp's converter permutes the rows of the Q and K projections into its interleaved rotary layout; we undo
that here so the weights match the checkpoint the GGUF was made from (rotate-half RoPE). Qwen2 files keep the
checkpoint's order (llama.cpp runs them with NeoX-style RoPE), and add q, k and v biases.

A reduced-vocabulary draft written by `verispec export --format gguf` has a residual stream widened by a few
dimensions (`verispec.export.gguf` says why); the `verispec.*` keys it carries let this reader narrow it back into
the very draft it was made from: its own width, epsilon, norm gains and output head rows (`lm_head.token_ids`).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from ..errors import VerispecError
from ..files import atomic_dir
from .gguf_index import Index

_LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
                "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
                "ffn_down": "mlp.down_proj"}
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
# Qwen2's split of text into words (as in its Hugging Face tokenizer.json and llama.cpp's "qwen2" pre-tokenizer)
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
               r"|\s+(?!\S)|\s+")
SHARD_BYTES = 1 << 30
_TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
WIDTH_KEY, EPS_KEY = "verispec.embedding_length", "verispec.layer_norm_rms_epsilon"   # a widened draft's own


def gain_scale(width: int, padded: int) -> float:
    """The factor on RMSNorm gains that keeps a norm's output when its input grows from `width` to `padded`
    dimensions (the mean of squares is taken over `padded`)."""
    return math.sqrt(width / padded)


def unscaled_gains(g: np.ndarray, scale: float, stored: str) -> np.ndarray:
    """Stored (scaled) fp32 gains [n] -> the draft's own fp32 gains [n], exactly when the draft stored them in the
    type of the file's matrices, `stored` (F16 or BF16: rounded back to it; F32: within an ulp)."""
    import torch
    g = torch.from_numpy(g.astype(np.float64) / scale)
    return g.to({"F16": torch.float16, "BF16": torch.bfloat16}.get(stored, torch.float32)).float().numpy()


def permute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's Q/K row permutation (checkpoint order -> its interleaved rotary layout). w: [n_head * head_dim,
    in] -> same shape."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's Q/K row permutation. w: [n_head * head_dim, in] -> same shape, HF row order."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _checkpoint_rows(w: np.ndarray, gguf_name: str, arch: str, n_head: int, n_kv: int) -> np.ndarray:
    """A tensor's rows [N, ...] in the checkpoint's order: llama's Q and K un-permuted, everything else as is."""
    if arch == "llama" and gguf_name.endswith("attn_q.weight"):
        return unpermute_rotary(w, n_head)
    if arch == "llama" and gguf_name.endswith("attn_k.weight"):
        return unpermute_rotary(w, n_kv)
    return w


def _dequantized(t, arch: str, n_head: int, n_kv: int, narrow: tuple[int, str] | None = None) -> np.ndarray:
    """GGUF tensor `t` as fp32, rows in the checkpoint's order; narrow: a widened draft's (own width, type of its
    matrices), to read back the draft's own tensor."""
    from . import quant
    if len(t.shape) == 2 and t.tensor_type.name in quant.TYPES:          # our own: the same bits, faster
        w = quant.dequantize_raw(t.data, t.tensor_type.name, int(t.shape[1]), int(t.shape[0])).numpy()
    else:
        import gguf
        w = np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32, order="C", copy=True)
    w = _checkpoint_rows(w, t.name, arch, n_head, n_kv)
    if narrow is None or t.name.endswith(".bias"):
        return w
    width, stored = narrow
    if w.ndim == 1:                                          # a norm's gains [padded]
        return unscaled_gains(w[:width], gain_scale(width, w.shape[0]), stored)
    if t.name.endswith(("attn_output.weight", "ffn_down.weight")):   # [padded, in]: outputs into the stream
        return np.ascontiguousarray(w[:width])
    if t.name == "output.weight":                            # [vocab, padded] -> the head's rows [head, width]
        return np.ascontiguousarray(w[head_rows(w, width), :width])
    return np.ascontiguousarray(w[:, :width])               # [out, padded] -> [out, width]


def head_rows(output: np.ndarray, width: int) -> np.ndarray:
    """A widened draft's output matrix [vocab, padded] -> ids of its head's tokens [head] (the rows that do not
    read the constant dimension)."""
    return np.flatnonzero(np.asarray(output[:, width]) == 0)


def widened(reader) -> tuple[int, str] | None:
    """(the draft's own width, the type of its matrices) when `reader` holds a widened export, else None."""
    width = _field(reader, WIDTH_KEY)
    output = next((t for t in reader.tensors if t.name == "output.weight"), None)
    return None if width is None or output is None else (int(width), output.tensor_type.name)


def hf_name(gguf_name: str) -> str:
    parts = gguf_name.split(".")
    if parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{parts[-1]}"
    if parts[0] in _TOP_NAMES:
        return f"{_TOP_NAMES[parts[0]]}.{parts[-1]}"
    raise VerispecError(f"unexpected tensor {gguf_name!r} in GGUF file")


def gguf_name(name: str) -> str:
    """Inverse of `hf_name`: a Hugging Face tensor name -> llama.cpp's."""
    layer = {hf: ours for ours, hf in _LAYER_NAMES.items()}
    top = {hf: ours for ours, hf in _TOP_NAMES.items()}
    parts = name.split(".")
    if parts[:2] == ["model", "layers"] and ".".join(parts[3:-1]) in layer:
        return f"blk.{parts[2]}.{layer['.'.join(parts[3:-1])]}.{parts[-1]}"
    if ".".join(parts[:-1]) in top:
        return f"{top['.'.join(parts[:-1])]}.{parts[-1]}"
    raise VerispecError(f"tensor {name!r} has no place in a GGUF file")


def _field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def read_gguf(path: Path, announce: str | None = None):
    """Return (hf_config dict, tensors, tokenizer_json dict, tokenizer_config dict); tensors yields
    (hf_name, fp32 array) pairs, one tensor dequantized at a time.

    `announce` is printed to stderr once the file has proved readable, before the slow dequantization.
    """
    try:
        reader = Index(path, strings=True)
        tokens = _field(reader, "tokenizer.ggml.tokens")
    except Exception as e:  # corrupt header, truncated file, not a GGUF at all
        raise VerispecError(f"cannot read GGUF file {path}: {e}") from None
    arch = _field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise VerispecError(f"{path}: architecture {arch!r} is not supported (only {', '.join(ARCHITECTURES)})")
    a = lambda key, default=None: _field(reader, f"{arch}.{key}", default)  # noqa: E731
    n_head, n_kv = int(a("attention.head_count")), int(a("attention.head_count_kv", a("attention.head_count")))
    if tokens is None:
        raise VerispecError(f"{path}: no tokenizer inside the GGUF file")
    if announce:
        print(announce, file=sys.stderr)
    names = {t.name: t for t in reader.tensors}
    narrow = widened(reader)
    width = narrow and narrow[0]
    config = {
        "model_type": arch, "architectures": [ARCHITECTURES[arch]], "hidden_act": "silu",
        "vocab_size": len(tokens), "hidden_size": width or int(a("embedding_length")),
        "intermediate_size": int(a("feed_forward_length")), "num_hidden_layers": int(a("block_count")),
        "num_attention_heads": n_head, "num_key_value_heads": n_kv,
        "rope_theta": float(a("rope.freq_base", 10000.0)),
        "rms_norm_eps": float(_field(reader, EPS_KEY, a("attention.layer_norm_rms_epsilon", 1e-5))),
        "max_position_embeddings": int(a("context_length", 2048)),
        "tie_word_embeddings": "output.weight" not in names,
        "bos_token_id": int(_field(reader, "tokenizer.ggml.bos_token_id", 1)),
        "eos_token_id": int(_field(reader, "tokenizer.ggml.eos_token_id", 2)),
    }
    ids = None if width is None else head_rows(names["output.weight"].data, width).astype(np.int64)
    if ids is not None and len(ids) < len(tokens):
        config["verispec_head_tokens"] = len(ids)

    def tensors():
        for t in reader.tensors:
            yield hf_name(t.name), _dequantized(t, arch, n_head, n_kv, narrow)
        if ids is not None and len(ids) < len(tokens):
            yield "lm_head.token_ids", ids
    tok_json, tok_cfg = _tokenizer(reader, tokens, config)
    return config, tensors(), tok_json, tok_cfg


def _tokenizer(reader, tokens, config):
    if _field(reader, "tokenizer.ggml.model") != "gpt2":
        raise VerispecError("only byte-level BPE (gpt2-style) GGUF tokenizers are supported")
    from tokenizers import Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    merges = [tuple(m.split(" ", 1)) for m in _field(reader, "tokenizer.ggml.merges")]
    tok = Tokenizer(BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    kind = _field(reader, "tokenizer.ggml.pre")
    if kind == "qwen2":  # as llama.cpp and transformers read the file: no NFC normalization, unlike Qwen's own
        pre = [pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    else:
        pre = [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        if kind in ("smollm", "starcoder", "refact"):  # llama.cpp splits every digit
            pre.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(pre)
    tok.decoder = decoders.ByteLevel()
    types = _field(reader, "tokenizer.ggml.token_type")
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, ty in enumerate(types) if ty == 3])  # 3 = control token
    tok_cfg = {"bos_token": tokens[config["bos_token_id"]], "eos_token": tokens[config["eos_token_id"]],
               "chat_template": _field(reader, "tokenizer.chat_template"),
               "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token", False)),
               "tokenizer_class": "PreTrainedTokenizerFast"}
    return json.loads(tok.to_str()), tok_cfg


def convert_gguf(path: Path, out_dir: Path, weights: bool = True) -> Path:
    """Dequantize `path` into the model folder `out_dir`, atomically (a half-written folder never appears).
    weights=False writes the config, tokenizer and `source.json` only (for --dtype gguf, which reads the file)."""
    import torch
    from safetensors.torch import save_file
    config, tensors, tok_json, tok_cfg = read_gguf(
        path, f"verispec: dequantizing {Path(path).name} into {out_dir} (once) ..." if weights else None)
    with atomic_dir(out_dir) as tmp:
        shard, size, n = {}, 0, 0
        for name, w in tensors if weights else ():   # shards of about 1 GiB: memory stays near one shard
            shard[name], size = torch.from_numpy(w), size + w.nbytes
            if size >= SHARD_BYTES:
                n += 1
                save_file(shard, str(tmp / f"model-{n:05d}.safetensors"), metadata={"format": "pt", "source": Path(path).name})
                shard, size = {}, 0
        if shard:
            name = "model.safetensors" if n == 0 else f"model-{n + 1:05d}.safetensors"
            save_file(shard, str(tmp / name), metadata={"format": "pt", "source": Path(path).name})
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        (tmp / "tokenizer.json").write_text(json.dumps(tok_json, ensure_ascii=False))
        (tmp / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2))
        (tmp / "source.json").write_text(json.dumps({"gguf": str(Path(path).resolve())}))
    return out_dir


def quantized_weights(path: Path, cfg, head_ids=None) -> tuple[dict, dict]:
    """The GGUF at `path` as the model `cfg` describes it, its quantized matrices left quantized.

    Returns (hf, packed): hf maps Hugging Face names to fp32 tensors (embeddings, norms, biases, and matrices stored
    unquantized) and, for each quantized matrix, to a meta tensor of its shape; packed maps those names to
    `quant.Packed` (the kernel's layout of the file's own blocks). The fp32 embedding is the file's dequantization;
    with tied embeddings its blocks are also packed, as "lm_head.weight", for the output head to read.
    head_ids ([H] int64 token ids, or None): the output head keeps only those rows, their blocks as stored.
    """
    import torch

    from . import quant
    reader = Index(path)                                  # gguf-py's reader would decode the tokenizer too (slow)
    arch, narrow = _field(reader, "general.architecture"), widened(reader)
    hf, packed = {}, {}
    for t in reader.tensors:
        name, kind = hf_name(t.name), t.tensor_type.name
        embedding = name == "model.embed_tokens.weight"
        tied_head = embedding and cfg.tie_embeddings and not cfg.head_tokens
        if len(t.shape) == 2 and kind in quant.TYPES and (not embedding or tied_head):
            n, k = int(t.shape[1]), int(t.shape[0])
            raw = np.asarray(t.data).reshape(n, -1)                                 # [N, bytes per row]
            raw = _checkpoint_rows(raw, t.name, arch, cfg.num_heads, cfg.num_kv_heads)   # whole rows move
            if head_ids is not None and (tied_head or name == "lm_head.weight"):    # a reduced head: its rows
                raw, n = raw[np.asarray(head_ids)], len(head_ids)
            packed["lm_head.weight" if embedding else name] = quant.pack(raw, kind, n, k)   # tied: the head's
            if not embedding:
                hf[name] = torch.empty(n, k, device="meta")
        if name not in hf:          # the embedding (looked up in fp32), and what is not a quantized matrix
            hf[name] = torch.from_numpy(_dequantized(t, arch, cfg.num_heads, cfg.num_kv_heads, narrow))
        if name == "lm_head.weight" and cfg.head_tokens:
            hf["lm_head.token_ids"] = torch.from_numpy(head_rows(t.data, narrow[0]).astype(np.int64))
    return hf, packed
