"""The EAGLE draft head: feature-level autoregression on the target's own hidden states.

At position j the head takes the target's feature f_j (its final-normed hidden state there, the vector its
output head turns into the distribution of token j + 1) and the embedding of token j + 1, fuses them,
[f_j, e(x_{j+1})] (2D) -> D, and runs one Llama decoder layer with its own KV cache to predict f_{j+1}.
The target's output embedding, restricted to `head_ids` (its most frequent answer tokens: a reduced vocabulary,
so a draft step costs a fraction of the target's output head), turns a predicted feature into logits. Drafting
feeds predicted features back in; after each verification the target's true features replace them.

The decoder layer is `Llama`'s own block (a one-layer `Llama` fed input vectors instead of token ids), so no
model code is copied. The token embedding and output matrix are the target's, borrowed at load time and never
stored: a head folder holds fc (2D x D) and one layer, about 5 M weights (fp16 safetensors), a config and a
model card.

Two layouts of the same parts (`layout`, saved as the config's `eagle_layout`):
- "verispec": the layer normalizes its input (input RMSNorm) and the head's output is final-normed, on the scale of
  the target's own features; that normed vector is both the prediction fed back and what the logits read.
- "eagle1": EAGLE-1's reference layout, as vLLM's `eagle` and SGLang's EAGLE run it: no input norm on the layer and
  no final norm; the layer's raw output is fed back and read by the logits. Only this layout exports to them
  exactly (`verispec export --format vllm`).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import nn

from ..errors import VerispecError
from .kv_cache import KVCache
from .llama import Llama, LlamaConfig
from .ops import Linear, product


LAYOUTS = ("verispec", "eagle1")


class EagleHead(nn.Module):
    def __init__(self, target_cfg: LlamaConfig, head_ids: torch.Tensor, taps: tuple[int, ...] = (),
                 final: bool = True, layout: str = "verispec", intermediate: int | None = None):
        """taps, final: the target features the head reads, the outputs of decoder layers `taps` (before the
        final norm) and, if `final`, the final-normed state; anything but the final state alone is first fused
        to D (`fuse`, as EAGLE-3 fuses low, middle and high layers). Drafting reads the final state alone.
        intermediate: the head's SwiGLU width (default: the target's; a wide target's head may be narrower)."""
        super().__init__()
        if layout not in LAYOUTS:
            raise ValueError(f"unknown EAGLE layout {layout!r} (known: {', '.join(LAYOUTS)})")
        d = target_cfg.hidden_size
        self.taps, self.final, self.layout = tuple(taps), final, layout
        self.in_width = d * (len(self.taps) + final)                    # columns of the target features read
        self.fuse = Linear(self.in_width, d, bias=False) if self.taps else None
        self.cfg = replace(target_cfg, num_layers=1, vocab_size=1, tie_embeddings=True, head_tokens=0,
                           embed_from_target=False, intermediate_size=intermediate or target_cfg.intermediate_size)
        self.fc = Linear(2 * d, d, bias=False)                      # [f_j, e(x_{j+1})] -> D
        self.decoder = Llama(self.cfg)                                  # one block + final norm (its 1-row
        self.register_buffer("head_ids", head_ids.clone())             # embedding is unused)
        if layout == "eagle1":                                          # no input norm, no final norm
            self.decoder.layers[0].attn_norm = nn.Identity()
            self.decoder.norm = nn.Identity()
        self.embed: torch.Tensor | None = None                         # [V, D] the target's, borrowed
        self.out: torch.Tensor | None = None                           # [H, D] its rows for head_ids
        self.out_product = None                                        # drafting's x -> x @ out.T, row-invariant

    def attach(self, target_embedding: torch.Tensor, out_rows: torch.Tensor) -> "EagleHead":
        """Borrow the target's input embedding [V, D] (the drafted tokens' inputs) and its output-head rows for
        head_ids [H, D] (`Llama.output_rows`; the same rows of the embedding when the target ties them)."""
        self.embed, self.out = target_embedding.detach(), out_rows.detach()
        return self

    def new_cache(self, capacity: int) -> KVCache:
        return self.decoder.new_cache(capacity)

    def fuse_features(self, feats: torch.Tensor) -> torch.Tensor:
        """[..., in_width] the target's features -> [..., D], the vectors `forward` takes as f_j."""
        return feats if self.fuse is None else self.fuse(feats)

    def forward(self, feats: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                cache: KVCache | None = None, mask=None) -> torch.Tensor:
        """feats [B, n, D] (f_j), tokens [B, n] (x_{j+1}), positions [B, n] (j) -> predicted f_{j+1} [B, n, D].
        mask: as `Llama.forward` takes it."""
        x = self.fc(torch.cat([feats, self.embed[tokens].to(feats.dtype)], -1))        # [B, n, D]
        return self.decoder(None, positions, cache, mask, embeds=x)

    def logits(self, feats: torch.Tensor) -> torch.Tensor:
        """[..., D] (predicted or true) features -> [..., H] float32 logits over the head tokens."""
        if self.out_product is not None and not torch.is_grad_enabled():     # drafting
            return self.out_product(feats).float()
        return (feats @ self.out.to(feats.dtype).T).float()

    def save(self, folder: Path, card: str, extra: dict) -> None:
        from safetensors.torch import save_file

        from ..files import atomic_dir
        state = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in self.state_dict().items()}
        with atomic_dir(folder) as tmp:
            save_file(state, str(tmp / "eagle.safetensors"), metadata={"format": "pt"})
            (tmp / "config.json").write_text(json.dumps({"verispec_eagle": 1, **json.loads(self.cfg.to_json()),
                                                         "head_tokens_eagle": len(self.head_ids),
                                                         "feature_taps": list(self.taps),
                                                         "feature_final": self.final,
                                                         "eagle_layout": self.layout, **extra},
                                                        indent=2))
            (tmp / "README.md").write_text(card)


def load_eagle(folder: str | Path, target, dtype: torch.dtype) -> tuple[EagleHead, dict]:
    """A head written by `verispec train-eagle`, attached to `target` (a Llama), in `dtype`, on its device."""
    folder = Path(folder)
    try:
        cfg = json.loads((folder / "config.json").read_text())
        from safetensors.torch import load_file
        state = load_file(str(folder / "eagle.safetensors"))
        if not cfg.get("verispec_eagle"):
            raise ValueError("not an EAGLE head (config.json lacks verispec_eagle)")
        if cfg["hidden_size"] != target.cfg.hidden_size:
            raise ValueError(f"the head is {cfg['hidden_size']} wide, the target {target.cfg.hidden_size}: "
                             "it was trained for another model")
        if cfg.get("feature_taps") or not cfg.get("feature_final", True):
            raise ValueError(f"it reads the target's layers {cfg.get('feature_taps')}, and drafting feeds heads the "
                             "final feature only (train-eagle --feature-layers final)")
        head = EagleHead(target.cfg, state["head_ids"], layout=cfg.get("eagle_layout", "verispec"),
                         intermediate=cfg.get("intermediate_size"))
        head.load_state_dict(state)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, AttributeError, SafetensorError) as e:
        raise VerispecError(f"cannot load the EAGLE head from {folder}: {e}") from None
    head = head.to(device=target.device, dtype=dtype).eval()
    head.attach(target.embed.weight, target.output_rows(head.head_ids.to(target.device)))
    head.out_product = product(head.out)
    return head, cfg
