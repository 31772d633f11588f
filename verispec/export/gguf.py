"""Write a draft model verispec loads as a GGUF file llama.cpp loads as `--model-draft` (`verispec export`).

llama.cpp wants a draft with its target's vocabulary, so the file carries the target's tokenizer metadata (every
`tokenizer.*` key, copied from the target's GGUF) and full-vocabulary matrices:
- token_embd: the draft's own embedding, or, for a draft that borrows its target's, the target's as its GGUF stores
  it (Q8_0 blocks copied as they are, other types dequantized to f32): llama.cpp embeds what verispec embeds;
- output: the draft's head rows at their token ids. Matrices keep the draft's stored dtype (fp16: exact); norm
  gains are f32, as llama.cpp expects.

A reduced-vocabulary draft gives every token outside its head probability 0. llama.cpp's llama and qwen2 graphs
have no output bias to say so, so the export widens the residual stream from D to D + PAD dimensions: the embedding
writes a constant C into the first new one, no layer writes into them (zero rows in attn_output and ffn_down, zero
gains in the layer norms, zero columns in the matrices that read the stream), and each outside token's output row
reads it with weight -BIG. The final norm's gain there is set so that dimension's output is BIG * sqrt(eps' / (m'
+ eps')) <= BIG (m': the mean square; within fp16, which llama.cpp's f16 matrix products round activations to), so
an outside token's logit is -BIG^2 sqrt(eps' / (m' + eps')): about -3e6 / r for a residual of rms r on the default
draft, below -100 for any r < 3e4, and its probability is 0 in float32. Widening changes the norms' mean of squares;
gains scaled by sqrt(D / (D + PAD)) and eps' = (eps D - C^2) / (D + PAD) give every norm the draft's output
(up to the f32 rounding of gains and eps'). `verispec.model.gguf` reads such a file back into the draft, bit
for bit when it stores fp16 or bf16 weights.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ..errors import VerispecError
from ..files import atomic_file, atomic_path
from ..model import loader
from ..model.gguf import EPS_KEY, WIDTH_KEY, gain_scale, gguf_name, permute_rotary
from ..model.gguf_index import Index
from ..model.llama import LlamaConfig

PAD = 32            # widening: one constant dimension and 31 zeros (one Q8_0 block more per embedding row)
BIG = 2.0 ** 15     # the final norm's output in the constant dimension (at most), and minus the outside rows' weight
_DTYPES = {torch.float16: ("F16", 1), torch.bfloat16: ("BF16", 32), torch.float32: ("F32", 0)}  # type, file type


def constant(cfg: LlamaConfig) -> float:
    """C: the widened dimension's value, a power of two (exact in fp16 and Q8_0) with C^2 <= eps D / 16."""
    return 2.0 ** math.floor(math.log2(math.sqrt(cfg.rms_eps * cfg.hidden_size) / 4))


def scaled_gains(g: np.ndarray, scale: float) -> np.ndarray:
    """The draft's gains [n] times `scale`, in fp32 (`unscaled_gains` reads fp16 or bf16 gains back exactly)."""
    return (g.astype(np.float64) * scale).astype(np.float32)


def _array(t: torch.Tensor):
    """A torch tensor -> (numpy array, raw GGML type or None) for GGUFWriter.add_tensor; bf16 goes as raw bytes."""
    import gguf
    if t.dtype == torch.bfloat16:
        return t.contiguous().view(torch.uint8).numpy(), gguf.GGMLQuantizationType.BF16
    return t.contiguous().numpy(), None


def _widen(t: torch.Tensor, rows: int = 0, cols: int = 0) -> torch.Tensor:
    """[N, K] -> [N + rows, K + cols] (or [K] -> [K + cols]), the new entries zero."""
    return torch.nn.functional.pad(t, (0, cols) if t.ndim == 1 else (0, cols, 0, rows))


def _embedding(target_reader, cfg: LlamaConfig, c: float, pad: int):
    """The target's token_embd [V, D], widened by `pad` columns [C, 0, ...]: (array, raw type or None)."""
    import gguf
    t = next((t for t in target_reader.tensors if t.name == "token_embd.weight"), None)
    if t is None or tuple(int(n) for n in t.shape) != (cfg.hidden_size, cfg.vocab_size):
        raise VerispecError(f"the target's embedding is not [{cfg.vocab_size}, {cfg.hidden_size}], the draft's "
                            "input width: this draft was trained for another target")
    if t.tensor_type == gguf.GGMLQuantizationType.Q8_0:            # blocks of 32: fp16 scale, 32 int8
        raw = np.asarray(t.data).reshape(cfg.vocab_size, -1)            # [V, D / 32 * 34] bytes
        if pad:
            block = np.zeros(34, dtype=np.uint8)
            block[:2] = np.frombuffer(np.float16(c).tobytes(), dtype=np.uint8)
            block[2] = 1                                                # C = scale * 1, then 31 zeros
            raw = np.concatenate([raw, np.tile(block, (cfg.vocab_size, pad // 32))], axis=1)
        return raw, gguf.GGMLQuantizationType.Q8_0
    w = torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32))
    if pad:
        w = _widen(w, cols=pad)
        w[:, cfg.hidden_size] = c
    return w.numpy(), None


def _tensors(hf: dict, cfg: LlamaConfig, arch: str, pad: int, c: float, eps2: float):
    """The draft's tensors under llama.cpp's names, permuted and widened: yields (name, torch tensor)."""
    d, scale = cfg.hidden_size, gain_scale(cfg.hidden_size, cfg.hidden_size + pad)
    for name, w in hf.items():
        if name in ("lm_head.token_ids", "model.embed_tokens.weight" if cfg.embed_from_target else ""):
            continue
        g = gguf_name(name)
        if arch == "llama" and g.endswith(("attn_q.weight", "attn_k.weight")):
            heads = cfg.num_heads if "attn_q" in g else cfg.num_kv_heads
            w = torch.from_numpy(permute_rotary(w.numpy(), heads))
        if pad and g.endswith("norm.weight"):                   # gains [D] -> [D + PAD], scaled
            w = torch.from_numpy(scaled_gains(w.float().numpy(), scale))
            w = _widen(w, cols=pad)
            if g == "output_norm.weight":                       # the constant dimension's output: <= BIG
                w[d] = BIG * math.sqrt(eps2) / c
        elif pad and g.endswith(("attn_output.weight", "ffn_down.weight")):
            w = _widen(w, rows=pad)                             # [D + PAD, in]: nothing written to the new dims
        elif pad and g == "output.weight":                      # [V, D + PAD]: head rows at their ids
            full = torch.zeros(cfg.vocab_size, d + pad, dtype=w.dtype)
            full[:, d] = -BIG
            full[hf["lm_head.token_ids"].long()] = _widen(w, cols=pad)
            w = full
        elif pad and w.ndim == 2:                               # [out, D] -> [out, D + PAD]
            w = _widen(w, cols=pad)
            if g == "token_embd.weight":
                w[:, d] = c
        elif w.ndim == 1:                                       # norms, biases: f32
            w = w.float()
        yield g, w


def _card(draft: Path, target_gguf: Path, cfg: LlamaConfig, pad: int, eps2: float, command: str) -> str:
    """The draft's own card (its README: training data, command, measured acceptance) and what the export did."""
    own = (draft / "README.md").read_text() if (draft / "README.md").exists() else f"# {draft.name}\n"
    lines = [own.rstrip(), "", "## GGUF export", "", f"```\n{command}\n```", "",
             f"- llama.cpp draft for {target_gguf.name}: its tokenizer metadata, all {cfg.vocab_size} tokens",
             "- weights as the draft stores them; norm gains in f32"]
    if cfg.embed_from_target:
        lines.append("- token_embd: the target's embedding, copied from its GGUF (the draft borrows it)")
    if pad:
        lines += [f"- the draft's output head covers {cfg.head_tokens} tokens; llama.cpp has no output bias to give "
                  "the others probability 0, so the residual stream is widened from "
                  f"{cfg.hidden_size} to {cfg.hidden_size + pad} dimensions: a constant one that every other "
                  f"token's output row reads with weight -{BIG:.0f} (logit below -100 while the residual's rms "
                  f"stays under {BIG * BIG * math.sqrt(eps2 * (cfg.hidden_size + pad) / cfg.hidden_size) / 100:.0e})"
                  ", norm gains and epsilon rescaled to keep every norm's output. Same function as the draft, up "
                  "to f32 rounding; verispec reads the file back into the draft itself.",
                  "- differs from verispec's own decoding of the draft: llama.cpp rounds activations to fp16 in "
                  "its f16 matrix products"]
    return "\n".join(lines) + "\n"


def export_gguf(draft: str | Path, out: str | Path, model: str | None = None, force: bool = False) -> tuple[Path, Path]:
    """Write `draft` (a draft folder, for target `model`) as OUT.gguf and its card as OUT.md. Returns both paths."""
    import gguf
    if not Path(out).name or Path(out).is_dir():
        raise VerispecError(f"--out names the file to write (OUT.gguf and OUT.md), not the folder {str(out)!r}")
    out = Path(out) if str(out).endswith(".gguf") else Path(f"{out}.gguf")
    card_path = out.with_suffix(".md")
    if not force and (out.exists() or card_path.exists()):
        raise VerispecError(f"{out if out.exists() else card_path} exists; pass --force to replace it")
    target_folder = loader.resolve(model, weights=False)
    if not (target_folder / "source.json").exists():
        raise VerispecError(f"the target's tokenizer metadata comes from its GGUF file, and {target_folder} was not "
                            "made from one: pass --model a model name or a .gguf file")
    target_gguf = loader.gguf_source(target_folder)
    reader = Index(target_gguf, strings=True)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    folder = loader.resolve(draft)
    cfg, _ = loader.read_config(folder)
    if cfg.vocab_size != len(tokens):
        raise VerispecError(f"the draft's vocabulary ({cfg.vocab_size} tokens) differs from the target's "
                            f"({len(tokens)}); a draft must share the target's tokenizer")
    try:
        hf = loader.read_weights(folder)
    except Exception as e:                      # a truncated or corrupt safetensors file: one line
        raise VerispecError(f"cannot load weights from {folder}: {type(e).__name__}: {e}") from None
    stored = next((w.dtype for n, w in hf.items() if n.endswith("proj.weight")), None)
    if stored is None:
        raise VerispecError(f"{folder}: no decoder layers to export (no *proj.weight tensors)")
    if stored not in _DTYPES:
        raise VerispecError(f"{folder}: weights in {stored}, expected fp16, bf16 or fp32")
    arch = "qwen2" if cfg.attention_bias else "llama"
    pad, c = (PAD, constant(cfg)) if cfg.head_tokens else (0, 0.0)
    eps2 = (cfg.rms_eps * cfg.hidden_size - c * c) / (cfg.hidden_size + pad)
    command = (f"verispec export --format gguf --draft {draft} --out {out}" + (f" --model {model}" if model else ""))
    card = _card(folder, target_gguf, cfg, pad, eps2, command)
    try:
        with atomic_file(card_path) as f, atomic_path(out) as tmp:
            f.write(card)
            w = gguf.GGUFWriter(str(tmp), arch)
            _metadata(w, reader, cfg, pad, eps2, card, folder.name, _DTYPES[stored][1])
            if cfg.embed_from_target:
                data, raw = _embedding(reader, cfg, c, pad)
                w.add_tensor("token_embd.weight", data, raw_dtype=raw)
            for name, t in _tensors(hf, cfg, arch, pad, c, eps2):
                data, raw = _array(t)
                w.add_tensor(name, data, raw_dtype=raw)
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
    except OSError as e:
        raise VerispecError(f"cannot write {out}: {e.strerror or e}") from None
    return out, card_path


def _metadata(w, reader, cfg: LlamaConfig, pad: int, eps2: float, card: str, name: str, file_type: int) -> None:
    """The draft's hyperparameters (at its widened width), its card, and the target's `tokenizer.*` keys."""
    import gguf
    w.add_type("model")
    w.add_name(name)
    w.add_description(card)
    w.add_file_type(file_type)
    w.add_vocab_size(cfg.vocab_size)
    w.add_context_length(cfg.max_position)
    w.add_embedding_length(cfg.hidden_size + pad)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_block_count(cfg.num_layers)
    w.add_head_count(cfg.num_heads)
    w.add_head_count_kv(cfg.num_kv_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_theta)
    w.add_layer_norm_rms_eps(eps2)
    if pad:
        w.add_uint32(WIDTH_KEY, cfg.hidden_size)
        w.add_float32(EPS_KEY, cfg.rms_eps)
    for key, field in reader.fields.items():
        if key.startswith("tokenizer."):
            array = field.types[0] == gguf.GGUFValueType.ARRAY
            w.add_key_value(key, field.contents(), field.types[0], sub_type=field.types[-1] if array else None)
