"""`verispec export --format vllm`: the exported names, shapes, dtypes and config keys against what vLLM's and
SGLang's loaders read, and their forward passes re-implemented here over the exported tensors (following the cited
source) giving verispec's heads' logits. The sources, as read (`verispec.export.vllm.LOADERS` has the commits):

- vLLM Medusa: vllm-project/vllm vllm/model_executor/models/medusa.py (ResidualBlock.forward, Medusa.__init__,
  compute_logits, load_weights) and vllm/transformers_utils/configs/medusa.py (MedusaConfig.__init__,
  from_pretrained).
- vLLM EAGLE-1: vllm-project/vllm vllm/model_executor/models/llama_eagle.py (LlamaDecoderLayer.__init__,
  LlamaModel.forward, load_weights, EagleLlamaForCausalLM.load_weights), vllm/transformers_utils/configs/eagle.py
  (EAGLEConfig: architectures LlamaForCausalLM -> EagleLlamaForCausalLM), vllm/model_executor/models/registry.py
  (_SPECULATIVE_DECODING_MODELS).
- SGLang EAGLE: sgl-project/sglang python/sglang/srt/models/llama_eagle.py (LlamaDecoderLayer, LlamaModel.forward,
  LlamaForCausalLMEagle.__init__ / load_weights), python/sglang/srt/speculative/eagle_worker.py (init_token_map,
  load_token_map: torch.load(path, weights_only=True) -> int64 hot token ids; the draft head is the target's
  head rows at those ids, and draft ids map back through them).
"""
from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from verispec.errors import VerispecError
from verispec.export.vllm import export_heads
from verispec.model.eagle import EagleHead, load_eagle
from verispec.model.llama import Llama, LlamaConfig
from verispec.model.medusa import load_heads

MEDUSA = "verispec/drafts/smollm2-135m-instruct-medusa"
EAGLE = "verispec/drafts/smollm2-135m-instruct-eagle"


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def test_medusa_matches_vllm(tmp_path, target_fp32):
    model = target_fp32[0]
    out = tmp_path / "medusa-vllm"
    export_heads(MEDUSA, model, out)
    cfg, t = json.loads((out / "config.json").read_text()), load_file(str(out / "model.safetensors"))
    k, d, v = 4, model.cfg.hidden_size, model.cfg.vocab_size
    # MedusaConfig / Medusa.__init__: the keys read; from_pretrained renames any key holding "num" and "heads" /
    # "layers" to num_heads / num_hidden_layers, so those must be the only such keys
    assert cfg["model_type"] == "medusa" and cfg["architectures"] == ["MedusaModel"]   # registry: MedusaModel
    assert (cfg["hidden_size"], cfg["vocab_size"], cfg["num_heads"], cfg["num_hidden_layers"]) == (d, v, k, 1)
    assert cfg["truncated_vocab_size"] == 8192 and cfg["medusa_fc_bias"] is True and cfg["original_lm_head"] is True
    assert [key for key in cfg if "num" in key] == ["num_heads", "num_hidden_layers"]
    # load_weights: blocks.i.layers.j.{weight,bias}; lm_heads.0.weight -> lm_head.weight (original_lm_head);
    # token_map kept as an index when truncated_vocab_size < vocab_size
    assert set(t) == {"token_map", "lm_heads.0.weight"} | {f"blocks.{i}.layers.0.{p}" for i in range(k)
                                                          for p in ("weight", "bias")}
    assert t["token_map"].dtype == torch.int64 and t["token_map"].shape == (8192,)
    assert t["lm_heads.0.weight"].shape == (8192, d) and t["blocks.0.layers.0.weight"].shape == (d, d)
    assert t["blocks.3.layers.0.bias"].shape == (d,) and t["blocks.0.layers.0.weight"].dtype == torch.float16
    assert "vllm serve" in (out / "README.md").read_text() and "Held-out" in (out / "README.md").read_text()

    heads, _ = load_heads(MEDUSA, model, torch.float32)
    h = model.norm(torch.randn(6, d, generator=torch.Generator().manual_seed(0)) * 3)   # final-normed states
    ours = heads(h)                                                                       # [6, K, H]
    for i in range(k):   # ResidualBlock.forward + compute_logits (token_map scatter, -inf elsewhere)
        w, b = t[f"blocks.{i}.layers.0.weight"].float(), t[f"blocks.{i}.layers.0.bias"].float()
        x = h + F.silu(h @ w.T + b)
        theirs = torch.full((6, v), float("-inf"))
        theirs[:, t["token_map"]] = x @ t["lm_heads.0.weight"].float().T
        wide = torch.full((6, v), float("-inf")).scatter_(-1, heads.head_ids.expand(6, -1), ours[:, i])
        assert torch.equal(wide.isinf(), theirs.isinf())
        torch.testing.assert_close(wide, theirs, atol=2e-4, rtol=1e-4)
        assert torch.equal(wide.argmax(-1), theirs.argmax(-1))


@pytest.fixture(scope="module")
def eagle1(tmp_path_factory):
    """A tiny random target and an eagle1-layout head on it (random norms too), saved as train-eagle saves."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_layers=1, num_heads=4,
                      num_kv_heads=2, max_position=64, rope_theta=10000.0)
    target = Llama(cfg).eval()
    head = EagleHead(cfg, torch.randperm(300)[:40], layout="eagle1")
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn_like(p) * (0.3 if p.dim() == 1 else 0.15) + (1 if p.dim() == 1 else 0))
    folder = tmp_path_factory.mktemp("eagle1") / "head"
    head.save(folder, "# tiny eagle1 head\n", {})
    out = folder.parent / "out"
    export_heads(folder, target, out, target_path="/models/tiny")
    return target, folder, out


def engine_layer(t: dict, cfg: dict, embed, tokens, feats):
    """vLLM llama_eagle.LlamaModel.forward / SGLang llama_eagle.LlamaModel.forward over the exported tensors:
    fc(cat(embeds, hidden)) (+ SGLang's fc.bias), layer 0 with input_layernorm = Identity, then
    `hidden_states + residual`, no final norm. tokens [n], feats [n, D] at positions 0..n-1 -> [n, D]."""
    g = {k: v.float() for k, v in t.items()}
    x = torch.cat([embed[tokens], feats], -1) @ g["fc.weight"].T + g.get("fc.bias", 0)
    n, nh, nkv = len(tokens), cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg["hidden_size"] // nh
    q, k, v = (x @ g[f"layers.0.self_attn.{p}_proj.weight"].T for p in "qkv")
    q, k, v = q.view(n, nh, hd), k.view(n, nkv, hd), v.view(n, nkv, hd)
    inv = cfg["rope_theta"] ** -(torch.arange(0, hd, 2, dtype=torch.float64) / hd)     # neox-style (rotate half)
    ang = (torch.arange(n, dtype=torch.float64)[:, None] * inv).float()
    cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None], torch.cat([ang.sin()] * 2, -1)[:, None]
    rot = lambda z: torch.cat([-z[..., hd // 2:], z[..., :hd // 2]], -1)                  # noqa: E731
    q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
    k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
    a = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True)
    h = x + a.transpose(0, 1).reshape(n, -1) @ g["layers.0.self_attn.o_proj.weight"].T
    m = rms(h, g["layers.0.post_attention_layernorm.weight"], cfg["rms_norm_eps"])
    mlp = (F.silu(m @ g["layers.0.mlp.gate_proj.weight"].T) * (m @ g["layers.0.mlp.up_proj.weight"].T))
    return h + mlp @ g["layers.0.mlp.down_proj.weight"].T


def test_eagle1_layout_matches_vllm_and_sglang(eagle1):
    target, folder, out = eagle1
    vcfg, scfg = (json.loads((out / p / "config.json").read_text()) for p in (".", "sglang"))
    vt, st = load_file(str(out / "model.safetensors")), load_file(str(out / "sglang" / "model.safetensors"))
    layer = {f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"} | \
        {f"layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")} | {"layers.0.post_attention_layernorm.weight"}
    # vLLM: fc has no bias; layer 0's input_layernorm is nn.Identity (a stored weight would hit params_dict[name]);
    # no final norm; embed_tokens and lm_head are the target's (skipped / shared); EAGLEConfig turns
    # LlamaForCausalLM into EagleLlamaForCausalLM, a registered speculative model
    assert set(vt) == layer | {"fc.weight"} and vt["fc.weight"].shape == (64, 128)
    assert vcfg["architectures"] == ["LlamaForCausalLM"] and vcfg["model_type"] == "llama"
    assert (vcfg["num_hidden_layers"], vcfg["vocab_size"], vcfg["hidden_size"]) == (1, 300, 64)
    assert (vcfg["num_attention_heads"], vcfg["num_key_value_heads"], vcfg["intermediate_size"]) == (4, 2, 96)
    assert not any(k.startswith("verispec_") for k in vcfg)
    # SGLang: LlamaForCausalLMEagle, fc = nn.Linear(2D, D) with a bias; untied (a tied lm_head is embed_tokens and
    # set_embed_and_head swaps both); hot token map: torch.load(weights_only=True), int64 ids
    assert set(st) == layer | {"fc.weight", "fc.bias"} and torch.equal(st["fc.bias"], torch.zeros(64).half())
    assert scfg["architectures"] == ["LlamaForCausalLMEagle"] and scfg["tie_word_embeddings"] is False
    hot = torch.tensor(torch.load(out / "sglang" / "hot_tokens.pt", weights_only=True), dtype=torch.int64)
    head, _ = load_eagle(folder, target, torch.float32)
    assert torch.equal(hot, head.head_ids) and all(v.dtype == torch.float16 for v in vt.values())

    gen = torch.Generator().manual_seed(1)
    feats, tokens, n = torch.randn(1, 7, 64, generator=gen), torch.randint(300, (1, 8), generator=gen), 7
    with torch.no_grad():
        cache = head.new_cache(16)
        ours = head(feats, tokens[:, :n], torch.arange(n)[None], cache)                 # [1, n, D] teacher-forced
        step = head(ours[:, -1:], tokens[:, n:], torch.tensor([[n]]), cache)            # a draft step fed back
        ours = torch.cat([ours, step], 1)[0]                                             # [n + 1, D]
        embed = target.embed.weight
        for t, cfg in ((vt, vcfg), (st, scfg)):
            theirs = engine_layer(t, cfg, embed, tokens[0, :n], feats[0])
            theirs = torch.cat([theirs, engine_layer(t, cfg, embed, tokens[0], torch.cat([feats[0], theirs[-1:]]))
                                [-1:]])                                                  # feeds back its raw output
            torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)
        logits = head.logits(ours)                                                       # [n + 1, H]
        torch.testing.assert_close(logits, theirs @ embed[hot].T, atol=1e-4, rtol=1e-4)   # SGLang: hot tokens
        full = theirs @ embed.T                                                          # vLLM: whole vocabulary
        torch.testing.assert_close(full[:, head.head_ids], logits, atol=1e-4, rtol=1e-4)
    readme = (out / "README.md").read_text()
    assert "--speculative-token-map" in readme and '"method": "eagle"' in readme and "tiny eagle1 head" in readme


def test_refusals(tmp_path, eagle1):
    target, folder, out = eagle1
    with pytest.raises(VerispecError, match="exists: pass --force"):
        export_heads(folder, target, out)
    export_heads(folder, target, out, force=True)                                        # replaced
    with pytest.raises(VerispecError, match="verispec-layout EAGLE head .*--layout eagle1"):
        export_heads(EAGLE, target, tmp_path / "x")
    tapped = tmp_path / "tapped"
    EagleHead(target.cfg, torch.arange(10), taps=(0,), layout="eagle1").save(tapped, "", {})
    with pytest.raises(VerispecError, match="reads the target's layers"):
        export_heads(tapped, target, tmp_path / "y")
    with pytest.raises(VerispecError, match="holds no verispec heads"):
        export_heads(out, target, tmp_path / "z")
    with pytest.raises(VerispecError, match="cannot read the head folder"):
        export_heads(tmp_path / "missing", target, tmp_path / "w")
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
