"""Medusa heads: K small residual blocks on the target's last hidden state, head i guessing the token i + 1
positions past the one the target itself predicts from that state.

Head i: h -> h + SiLU(W_i h + b_i) -> the target's own output embedding, restricted to the `head_ids` tokens
(the target's most frequent answer tokens); every other token gets probability 0. Each head has its own block
(a ModuleList of distinct modules); the output matrix is the target's, borrowed at load time and never stored,
so the shipped heads hold only K x (D x D + D) weights. W_i starts at zero: an untrained head copies the target's
next-token guess, the usual Medusa start.

A heads folder holds `medusa.safetensors` (fp16), `config.json`, `README.md` (model card) and `trees.json`
(per-head top-r accuracy measured on held-out data, and the default trees built from it, see `medusa_tree`).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from torch import nn

from ..errors import VerispecError
from .ops import Linear, product


class MedusaHeads(nn.Module):
    def __init__(self, num_heads: int, hidden: int, head_ids: torch.Tensor):
        super().__init__()
        self.blocks = nn.ModuleList(Linear(hidden, hidden) for _ in range(num_heads))   # distinct blocks
        for b in self.blocks:
            nn.init.zeros_(b.weight)
            nn.init.zeros_(b.bias)
        self.register_buffer("head_ids", head_ids.clone())             # [H] vocabulary id of each output row
        self.out: torch.Tensor | None = None                           # [H, D] target output rows, borrowed

    @property
    def num_heads(self) -> int:
        return len(self.blocks)

    def attach(self, out_rows: torch.Tensor) -> "MedusaHeads":
        """Borrow the target's output-head rows for the head tokens ([H, D], `Llama.output_rows(head_ids)`; not a
        parameter: never trained)."""
        self.out = out_rows.detach()
        self.out_product = product(self.out)
        return self

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., D] final-normed target hidden states -> [..., K, H] logits over the head tokens."""
        feats = torch.stack([hidden + F.silu(b(hidden)) for b in self.blocks], -2)   # [..., K, D]
        return self.out_product(feats.to(self.out.dtype))                            # [..., K, H] fp32

    def save(self, folder: Path, card: str, trees: dict) -> None:
        from safetensors.torch import save_file

        from ..files import atomic_dir
        state = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in self.state_dict().items()}
        with atomic_dir(folder) as tmp:
            save_file(state, str(tmp / "medusa.safetensors"), metadata={"format": "pt"})
            (tmp / "config.json").write_text(json.dumps({"verispec_medusa": 1, "num_heads": self.num_heads,
                                                         "hidden_size": self.blocks[0].in_features,
                                                         "head_tokens": len(self.head_ids)}, indent=2))
            (tmp / "trees.json").write_text(json.dumps(trees, indent=1))
            (tmp / "README.md").write_text(card)


def load_heads(folder: str | Path, target, dtype: torch.dtype) -> tuple[MedusaHeads, dict]:
    """Heads and their trees.json from a folder written by `verispec train-medusa`, attached to `target` (a Llama)."""
    folder = Path(folder)
    try:
        cfg = json.loads((folder / "config.json").read_text())
        trees = json.loads((folder / "trees.json").read_text())
        from safetensors.torch import load_file
        state = load_file(str(folder / "medusa.safetensors"))
        heads = MedusaHeads(int(cfg["num_heads"]), int(cfg["hidden_size"]), state["head_ids"])
        heads.load_state_dict(state)
    except (OSError, ValueError, KeyError, RuntimeError, TypeError, AttributeError, SafetensorError) as e:
        raise VerispecError(f"cannot load Medusa heads from {folder}: {e}") from None
    if heads.blocks[0].in_features != target.cfg.hidden_size:
        raise VerispecError(f"Medusa heads in {folder} are {heads.blocks[0].in_features} wide, the target "
                            f"{target.cfg.hidden_size}: they were trained for another model")
    heads = heads.to(device=target.embed.weight.device, dtype=dtype)
    return heads.attach(target.output_rows(heads.head_ids)).eval(), trees
