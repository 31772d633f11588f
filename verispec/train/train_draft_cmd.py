"""The `verispec train-draft` command: data -> checkpoints (resumable) -> an fp16 draft folder with a model card."""
from __future__ import annotations

import json
import shlex
import shutil
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from ..errors import VerispecError
from ..files import atomic_dir, check_new_folder
from ..model import loader
from .data import frequent_tokens, load_examples, row_index, split_held_out
from .progress import StepBar
from .workdir import (check_made_by, load_checkpoint, replaces_own, resume, save_checkpoint, source_settings,
                      train_in_rounds, work_folder)
from .draft import LOSSES, DraftShape, TrainConfig, evaluate, init_draft, make_optimizer, train_steps


def save_draft(model, folder: Path, tokenizer_from: Path, card: str) -> None:
    """Write the draft as an fp16 model folder (safetensors + config + tokenizer + README card), atomically."""
    from safetensors.torch import save_file
    state = {k: (v.half() if v.is_floating_point() else v).contiguous()
             for k, v in loader.split_to_hf(model).items()}
    with atomic_dir(folder) as tmp:
        save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        (tmp / "config.json").write_text(json.dumps({**model.cfg.to_hf(), "torch_dtype": "float16"}, indent=2))
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(tokenizer_from / name, tmp / name)
        (tmp / "README.md").write_text(card)


def model_card(args, shape, cfg, data_info, metrics, wall_s, coverage) -> str:
    lines = [f"# verispec draft: {Path(args.out).name}", "",
             "A small Llama-family draft for speculative decoding, distilled from the target's own answers.", "",
             "```", "verispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]), "```", "",
             f"- target: {args.model or 'SmolLM2-135M-Instruct (verispec default)'}",
             f"- shape: {json.dumps(asdict(shape))}", f"- training: {json.dumps(asdict(cfg))}",
             f"- data: {data_info}", f"- output head covers {coverage:.2%} of the target's answer tokens",
             f"- wall time: {wall_s / 60:.1f} min on {torch.get_num_threads()} CPU threads",
             *([f"- stopped early at step {args.stop_at} of the {cfg.steps}-step schedule (--stop-at)"]
               if args.stop_at is not None and args.stop_at < cfg.steps else []), "",
             "Held-out metrics (training-split prompts kept aside, target top-32 soft targets):", "",
             "| metric | value |", "| --- | ---: |"]
    lines += [f"| {k} | {v:.4f} |" for k, v in metrics.items()]
    lines += ["", "`alpha` estimates acceptance at temperature 1 (sum of min(p, q) over the target's top 32);",
              "`greedy` is how often the draft's argmax equals the target's (acceptance at temperature 0).", ""]
    return "\n".join(lines)


def cmd_train_draft(args) -> int:
    if args.loss not in LOSSES:
        raise VerispecError(f"unknown loss {args.loss!r}: choose from {', '.join(LOSSES)}")
    shape = DraftShape(args.layers, args.hidden, args.heads, args.kv_heads, args.intermediate, args.head_tokens,
                       args.from_target)
    cfg = TrainConfig(args.loss, args.steps, args.tokens_per_batch, args.lr, min(args.warmup, args.steps),
                      seed=args.seed)
    if args.stop_at is not None and not 1 <= args.stop_at <= args.steps:
        raise VerispecError(f"--stop-at must be between 1 and --steps ({args.steps}), got {args.stop_at}")
    if args.steps < 1 or (not args.from_target and (args.hidden % args.heads or args.heads % args.kv_heads)):
        raise VerispecError("need --steps >= 1, --hidden divisible by --heads, --heads by --kv-heads")
    check_new_folder(args.out, replaces_own(args))
    check_made_by(args.data, args.model)
    examples = load_examples(args.data, args.max_tokens)
    train, held = split_held_out(examples, args.eval_examples, args.data)
    target, tok, target_dir = loader.load(args.model, "fp32", "cpu")
    shape = shape.resolved(target.cfg)
    work = work_folder(args.out)
    ckpt_path = work / "checkpoint.pt"
    settings = {"shape": asdict(shape), "train": asdict(cfg), **source_settings(args), "max_tokens": args.max_tokens}
    ckpt = load_checkpoint(ckpt_path, settings)
    if ckpt is not None:
        head_ids = ckpt["head_ids"]
    else:
        head_ids = (frequent_tokens(train, shape.head_tokens, set(tok.stop_token_ids))
                    if shape.head_tokens else None)
        if head_ids is not None and len(head_ids) < shape.head_tokens:
            raise VerispecError(f"the training data holds only {len(head_ids)} distinct tokens: use --head-tokens "
                                f"{len(head_ids)} or fewer (0 = the full vocabulary)")
    head_index = row_index(head_ids, target.cfg.vocab_size)
    model = init_draft(target, shape, head_ids, args.seed)
    opt = make_optimizer(model, cfg)
    step, wall, history = resume(ckpt, model, opt, "model")
    del target

    bar = StepBar(cfg.steps, step, "train-draft")
    on_step = lambda s, out, _: bar.step(out[cfg.loss])  # noqa: E731

    def evaluate_and_save(step, wall):
        metrics = evaluate(model, held, head_index)
        history.append({"step": step, "wall_s": round(wall, 1), **{k: round(v, 4) for k, v in metrics.items()}})
        bar.show(alpha=f"{metrics['alpha']:.3f}", greedy=f"{metrics['greedy']:.3f}")
        save_checkpoint(ckpt_path, settings, head_ids=head_ids, model=model.state_dict(),
                        optimizer=opt.state_dict(), step=step, wall_s=wall, history=history)

    step, wall = train_in_rounds(step, cfg.steps if args.stop_at is None else args.stop_at, args.eval_every, wall,
                                 lambda start, stop: train_steps(model, opt, train, head_index, cfg, start, stop,
                                                                 on_step),
                                 evaluate_and_save)
    bar.close()
    final = history[-1]
    answer_tokens = torch.cat([e.tokens[e.first:] for e in train])
    coverage = float((head_index[answer_tokens] >= 0).float().mean())
    info = (f"{args.data}: {len(train)} training / {len(held)} held-out answers, "
            f"{int(answer_tokens.numel())} answer tokens")
    card = model_card(args, shape, cfg, info, {k: v for k, v in final.items() if k not in ("step",)}, wall,
                      coverage)
    save_draft(model, Path(args.out), target_dir, card)
    (work / "history.json").write_text(json.dumps(history, indent=1))
    print(f"draft written to {args.out}: held-out alpha {final['alpha']:.3f}, greedy {final['greedy']:.3f}")
    return 0
