"""`verispec export --format vllm`: Medusa and EAGLE heads in the checkpoint layouts vLLM and SGLang load.

Each layout was read off the engine's loader (`LOADERS`; tests/test_export_vllm.py checks names, shapes, dtypes
and config keys against them and re-implements their forward passes over the exported tensors):
- Medusa -> vLLM `medusa`: head i's block as blocks.i.layers.0.{weight, bias} (medusa_fc_bias), the output rows
  all heads share as lm_heads.0.weight [H, D] (original_lm_head; the target's output-head rows for the head tokens,
  which vLLM cannot borrow) and
  token_map [H] with truncated_vocab_size = H, which vLLM scatters into the full vocabulary, -inf elsewhere: the
  same function as verispec's heads. (SGLang has no Medusa.)
- EAGLE, layout "eagle1" -> vLLM `eagle` (OUT/) and SGLang EAGLE (OUT/sglang/, with hot_tokens.pt for
  --speculative-token-map). fc's column halves swap ([e, f] there, [f, e] here); both engines borrow the target's
  embedding and output matrix, as verispec does. SGLang drafts over the head's tokens (its token map): exact.
  vLLM's EAGLE-1 has no reduced vocabulary and drafts over all the target's tokens: the same layer, a wider choice.
- Refused: verispec-layout EAGLE heads (the input and final norms neither engine's EAGLE-1 has; EAGLE-3's layer
  is another design), heads reading several target layers, Qwen2 targets' heads (q/k/v biases).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ..errors import VerispecError
from ..files import check_new_folder

# The engine sources each layout was checked against: (repository, path, commit read).
LOADERS = {
    "vllm medusa": ("vllm-project/vllm", "vllm/model_executor/models/medusa.py",
                    "09cddad8f0324594022359cd2b07e962a14b895f"),
    "vllm medusa config": ("vllm-project/vllm", "vllm/transformers_utils/configs/medusa.py",
                           "0531c2226a6a25cd96ccc856f3bda3f0bb4efb5f"),
    "vllm eagle": ("vllm-project/vllm", "vllm/model_executor/models/llama_eagle.py",
                   "00da92319af4b2ad2cde8525b7b609c779bdc52f"),
    "sglang eagle": ("sgl-project/sglang", "python/sglang/srt/models/llama_eagle.py",
                     "034b3be819faf3f84c5aae5a4cda27bdf2e12de0"),
}
EAGLE_STEPS = 5                       # draft depth in the suggested serve commands


def export_vllm(args) -> int:
    """The CLI's adapter: args.draft (a head folder), args.model (its target), args.out, args.force."""
    from ..api import Target
    target = Target.load(args.model, "fp32", "cpu")
    print(export_heads(args.draft, target.model, args.out, args.force, target.folder))
    return 0


def export_heads(draft, target, out, force: bool = False, target_path: str = "TARGET") -> str:
    """Write the heads in `draft` (a train-medusa / train-eagle folder) for vLLM (and SGLang) to `out`, atomically.
    target: the Llama the heads were trained on (its output rows are read); target_path: what to serve.
    Returns a one-line summary."""
    draft, out = Path(draft), Path(out)
    try:
        cfg = json.loads((draft / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise VerispecError(f"cannot read the head folder {draft}: {e}") from None
    check_new_folder(out, force)
    if out.resolve() == draft.resolve():
        raise VerispecError(f"--out {out} is the head folder itself: choose another")
    target_path = str(target_path)
    if cfg.get("verispec_medusa"):
        files, mapping, serve = medusa_files(draft, target, out.resolve(), target_path)
    elif cfg.get("verispec_eagle"):
        files, mapping, serve = eagle_files(draft, cfg, target, out.resolve(), target_path)
    else:
        raise VerispecError(f"{draft} holds no verispec heads (config.json lacks verispec_medusa / verispec_eagle)")
    own = draft / "README.md"
    files["README.md"] = export_card(own.read_text() if own.exists() else "", draft, mapping, serve)
    write(out, files)
    return f"{draft.name} exported to {out}: " + "; ".join(serve)


def medusa_files(folder: Path, target, out: Path, target_path: str):
    from ..model.medusa import load_heads
    heads, _ = load_heads(folder, target, torch.float32)
    ids = heads.head_ids.cpu().long()                                            # [H]
    rows = exact_dtype(target.output_rows(ids).detach().float().cpu())           # [H, D] the output rows
    d, k = rows.shape[1], heads.num_heads
    tensors = {"token_map": ids, "lm_heads.0.weight": rows}     # original_lm_head: one output matrix for all heads
    for i, block in enumerate(heads.blocks):                                     # fp16, as the head folder holds
        tensors[f"blocks.{i}.layers.0.weight"] = block.weight.detach().cpu().half()   # [D, D]
        tensors[f"blocks.{i}.layers.0.bias"] = block.bias.detach().cpu().half()       # [D]
    config = {"model_type": "medusa", "architectures": ["MedusaModel"], "hidden_size": d,
              "vocab_size": target.cfg.vocab_size, "num_heads": k, "num_hidden_layers": 1,
              "truncated_vocab_size": len(ids), "medusa_fc_bias": True, "original_lm_head": True,
              "torch_dtype": "float16"}
    mapping = [f"- vLLM `medusa` (OUT/): {k} heads, each `blocks.i.layers.0` (h + SiLU(W h + b)), sharing one output "
               f"matrix (original_lm_head) `lm_heads.0.weight` [{len(ids)}, {d}] = the target's output-head rows for "
               f"the head's tokens "
               f"(`token_map`, truncated_vocab_size {len(ids)} of {target.cfg.vocab_size}; every other token gets "
               "-inf, as in verispec). Exact: the same function of the target's final-normed hidden state.",
               "- vLLM's Medusa proposes one chain, each head's top-1 token (verispec also grows trees from them)."]
    serve = [vllm_command(target_path, "medusa", out, k)]
    return {"config.json": config, "model.safetensors": tensors}, mapping, serve


def eagle_files(folder: Path, cfg: dict, target, out: Path, target_path: str):
    if cfg.get("feature_taps") or not cfg.get("feature_final", True):
        raise VerispecError(f"{folder} reads the target's layers {cfg.get('feature_taps')}: vLLM's and SGLang's "
                            "EAGLE-1 read the final feature only (train-eagle --feature-layers final)")
    if cfg.get("eagle_layout", "verispec") != "eagle1":
        raise VerispecError(f"{folder} is a verispec-layout EAGLE head (input norm on its layer, final norm on its "
                            "output), which vLLM's and SGLang's EAGLE-1 lack and EAGLE-3's layer does not match: "
                            "train one with `verispec train-eagle --layout eagle1` to export")
    if cfg.get("attention_bias"):
        raise VerispecError(f"{folder} has q/k/v biases (a Qwen2 target's head): only Llama-layer heads export")
    from ..model.eagle import load_eagle
    from ..model.loader import split_to_hf
    head, _ = load_eagle(folder, target, torch.float32)
    d, ids = head.cfg.hidden_size, head.head_ids.cpu().long()
    layer = {k.removeprefix("model."): v.cpu().half() for k, v in split_to_hf(head.decoder).items()
             if k.startswith("model.layers.")}                       # q/k/v/o, gate/up/down, post-attention norm
    w = head.fc.weight.detach().cpu()                                # [D, 2D] over [f_j, e(x_(j+1))]
    fc = torch.cat([w[:, d:], w[:, :d]], 1).half()                   # [D, 2D] over [e, f], the engines' order
    hf = {k: v for k, v in head.cfg.to_hf().items() if not k.startswith("verispec_")}
    hf.update(vocab_size=target.cfg.vocab_size, tie_word_embeddings=False, torch_dtype="float16")
    files = {"config.json": {**hf, "architectures": ["LlamaForCausalLM"]},     # vLLM: -> EagleLlamaForCausalLM
             "model.safetensors": {"fc.weight": fc, **layer},
             "sglang/config.json": {**hf, "architectures": ["LlamaForCausalLMEagle"]},
             "sglang/model.safetensors": {"fc.weight": fc.clone(), "fc.bias": torch.zeros(d, dtype=torch.float16),
                                          **{k: v.clone() for k, v in layer.items()}},
             "sglang/hot_tokens.pt": ids.tolist()}                  # [H] token ids (SGLang: torch.tensor(ids, int64))
    mapping = ["- The layer: fc [e(x_(j+1)), f_j] -> D (verispec's column halves swapped), one Llama decoder layer "
               "without input norm, no final norm; its output is both fed back and read by the logits, as in "
               "EAGLE-1 and verispec's eagle1 layout. The target's final-normed hidden state is the feature.",
               f"- SGLang EAGLE (OUT/sglang/): exact, the head's {len(ids)} tokens as the hot-token map "
               "(hot_tokens.pt, --speculative-token-map); fc.bias is stored as zeros (SGLang's fc has a bias).",
               f"- vLLM `eagle` (OUT/): exact layer, but vLLM's EAGLE-1 drafts over all {target.cfg.vocab_size} "
               f"target tokens, not the head's {len(ids)}: its draft may pick a token verispec's never would. "
               "Outputs stay exact (the target verifies); acceptance can differ.",
               "- Not exported: vLLM / SGLang `eagle3` (its layer normalizes embedding and feature apart and attends "
               "over both, 2D wide): no verispec head has that layer, so there are no d2t / t2d maps to write."]
    sglang = (f"python -m sglang.launch_server --model-path {target_path} --speculative-algorithm EAGLE "
              f"--speculative-draft-model-path {out / 'sglang'} --speculative-token-map "
              f"{out / 'sglang' / 'hot_tokens.pt'} --speculative-num-steps {EAGLE_STEPS} --speculative-eagle-topk 1 "
              f"--speculative-num-draft-tokens {EAGLE_STEPS + 1}")
    return files, mapping, [vllm_command(target_path, "eagle", out, EAGLE_STEPS), sglang]


def vllm_command(target_path: str, method: str, out: Path, tokens: int) -> str:
    spec = json.dumps({"method": method, "model": str(out), "num_speculative_tokens": tokens})
    return f"vllm serve {target_path} --speculative-config '{spec}'"


def exact_dtype(t: torch.Tensor) -> torch.Tensor:
    """t (float) in fp16 or bf16 where that holds every value exactly, else fp32: rows copied, never rounded."""
    for dtype in (torch.float16, torch.bfloat16):
        if torch.equal(t.to(dtype).float(), t.float()):
            return t.to(dtype)
    return t.float()


def export_card(own: str, folder: Path, mapping: list[str], serve: list[str]) -> str:
    """The head's own model card (training data, command, measured acceptance) plus what the export maps, the
    loaders it was checked against and the serve commands."""
    checked = [f"- {what}: {repo} `{path}` (read at {commit[:12]})" for what, (repo, path, commit) in LOADERS.items()]
    return "\n".join([own.rstrip(), "", f"## Export for vLLM / SGLang (`verispec export --format vllm` of "
                      f"{folder.name})", "", *mapping, "", "Checked against (names, shapes, config keys, forward "
                      "pass re-implemented in verispec's tests/test_export_vllm.py):", "", *checked, "",
                      "Serve (the target must be the weights the heads were trained on):", "", "```",
                      *serve, "```", "", "Audit the deployment against one without speculation: `verispec audit "
                      "--url URL --reference-url URL2`.", ""])


def write(out: Path, files: dict) -> None:
    """files: relative path -> tensors (.safetensors), a tensor (.pt), a dict (.json) or text, in one rename."""
    from safetensors.torch import save_file

    from ..files import atomic_dir
    with atomic_dir(out) as tmp:
        for name, value in files.items():
            path = tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".safetensors"):
                save_file({k: v.contiguous() for k, v in value.items()}, str(path), metadata={"format": "pt"})
            elif name.endswith(".pt"):
                torch.save(value, path)
            elif name.endswith(".json"):
                path.write_text(json.dumps(value, indent=2))
            else:
                path.write_text(value)
