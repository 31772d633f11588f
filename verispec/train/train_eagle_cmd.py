"""The `verispec train-eagle` command: data -> target features -> EAGLE head (resumable) -> head folder."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import torch

from ..errors import VerispecError
from ..model.eagle import EagleHead
from .data import frequent_tokens
from .eagle import draft_acceptance, eagle_loss, length_groups, pad_batch, train_steps
from .features import store_folder, stored_features, target_settings
from .progress import StepBar
from .workdir import data_settings, load_checkpoint, resume, save_checkpoint, start_run, train_in_rounds


def model_card(args, feature: str, info: str, acc: list[list[float]], wall_s: float, history: list,
               head_tokens: int) -> str:
    lines = [f"# verispec EAGLE head: {Path(args.out).name}", "",
             "An EAGLE draft head: it predicts the target's next feature from its current one and the next token, "
             "and drafts by feeding its predictions back.", "", "```",
             "verispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]), "```", "",
             f"- target: {args.model or 'SmolLM2-135M-Instruct (verispec default)'}; feature: {feature}",
             f"- head: fc [f_j, e(x_(j+1))] 2D -> D, one Llama decoder layer ({LAYOUT_TEXT[args.layout]}), output "
             f"= the target's embedding rows of the {head_tokens} most frequent answer tokens"
             + (" of the initial head's data" if args.init else "") + " (borrowed, not stored)",
             *([f"- started from the trained head `{args.init}`"] if args.init else []),
             f"- training: {args.steps} steps x {args.batch} sequences, lr {args.lr}, seed {args.seed}; loss smooth "
             f"L1 on features + {args.cls_weight} x KL(target || head); feature noise U(-{args.noise}, "
             f"{args.noise}); " + (f"training-time test over {args.unroll} draft steps" if args.unroll > 1
                                   else "teacher-forced (no training-time test)")
             + (f"; each batch's sequences from one {args.group_lengths}-token span of lengths" if args.group_lengths
                else ""), f"- data: {info}",
             f"- wall time: {wall_s / 60:.1f} min on {torch.get_num_threads()} CPU threads", "",
             "Held-out acceptance by draft depth (drafting from true features, feeding predictions back; hit = "
             "the head's rank-r choice is the target's greedy token, given the earlier ones were):", "",
             "| depth | top-1 | top-2 | top-4 | top-8 |", "| ---: | ---: | ---: | ---: | ---: |",
             *[f"| {d + 1} | " + " | ".join(f"{sum(row[:r]):.3f}" for r in (1, 2, 4, 8)) + " |"
               for d, row in enumerate(acc)], "",
             "Held-out during training: " + ", ".join(f"step {h['step']}: loss {h['loss']:.3f} top-1 {h['top1']:.3f}"
                                                      for h in history), ""]
    return "\n".join(lines)


LAYOUT_TEXT = {"verispec": "with its input norm, output final-normed",
               "eagle1": "EAGLE-1's layout: no input norm, no final norm; exports exactly to vLLM and SGLang"}


def parse_layers(spec: str, num_layers: int | None = None) -> tuple[tuple[int, ...], bool]:
    """--feature-layers "final" | "29" | "2,15,29" | "2,15,final" -> (decoder layers tapped, final state read)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    try:
        taps = tuple(int(p) for p in parts if p != "final")
    except ValueError:
        raise VerispecError(f"--feature-layers takes layer numbers and 'final', got {spec!r}") from None
    bad = [t for t in taps if t < 0 or (num_layers is not None and t >= num_layers)]
    if not parts or bad or len(set(parts)) < len(parts):
        raise VerispecError(f"--feature-layers: need distinct layers in [0, {num_layers}) or 'final', got {spec!r}")
    return taps, "final" in parts


def feature_text(taps: tuple[int, ...], final: bool) -> str:
    if not taps:
        return "the target's final-normed last hidden state (what its output head reads)"
    return (f"the outputs of the target's decoder layers {', '.join(map(str, taps))} (before the final norm)" +
            (" and its final-normed state" if final else "") + ", fused to D by a linear layer")


def initial_head(folder: str, target) -> EagleHead:
    """A trained head to start from (`--init`): same target width, its own head tokens."""
    from ..model.eagle import load_eagle
    head, _ = load_eagle(folder, target, torch.float32)
    return head


def cmd_train_eagle(args) -> int:
    width = 1 if args.intermediate is None else args.intermediate
    if min(args.steps, args.batch, args.unroll, width) < 1:     # --eval-every, --head-tokens, --noise: typed flags
        raise VerispecError("need --steps, --batch, --unroll, --intermediate >= 1")
    if args.unroll > 16:                                        # (a draft is never that deep; nor are short answers)
        raise VerispecError(f"--unroll must be at most 16, got {args.unroll}")
    if args.stop_at is not None and not 1 <= args.stop_at <= args.steps:
        raise VerispecError(f"--stop-at must be between 1 and --steps ({args.steps}), got {args.stop_at}")
    taps, final = parse_layers(args.feature_layers)
    if args.init and (taps or not final):
        raise VerispecError("--init starts from a head on the final feature: use it with --feature-layers final")
    train, held, target, tok, work = start_run(args)
    taps, final = parse_layers(args.feature_layers, target.cfg.num_layers)
    settings = {**data_settings(args),
                "head_tokens": None if args.init else args.head_tokens,   # (--init: the initial head's own)
                "steps": args.steps, "batch": args.batch, "lr": args.lr, "seed": args.seed,
                "cls_weight": args.cls_weight, "noise": args.noise, "bf16_autocast": args.bf16_autocast,
                "unroll": args.unroll, "init": str(Path(args.init).resolve()) if args.init else None}
    if args.layout != "verispec":              # (the default: the settings older runs' checkpoints carry)
        settings["layout"] = args.layout
    if args.intermediate:                      # (likewise)
        settings["intermediate"] = args.intermediate
    if args.group_lengths:                     # (likewise)
        settings["group_lengths"] = args.group_lengths
    if taps:                                   # (final alone: the settings older runs' checkpoints carry)
        settings["feature_layers"], settings["feature_final"] = list(taps), final
    ckpt_path = work / "checkpoint.pt"
    ckpt = load_checkpoint(ckpt_path, settings)                      # (refused before any features)
    if args.init:                                                    # fine-tune a trained head (fp32), checked
        head = initial_head(args.init, target)                       # before any features
        if head.layout != args.layout:
            raise VerispecError(f"--init {args.init} is a {head.layout}-layout head, not --layout {args.layout}")
        if args.intermediate and args.intermediate != head.cfg.intermediate_size:
            raise VerispecError(f"--init {args.init} has SwiGLU width {head.cfg.intermediate_size}, not "
                                f"--intermediate {args.intermediate}")
        head_ids = head.head_ids
    folder = store_folder(args.data, work, target_settings(args.model, args.dtype, taps))
    train_f, held_f = stored_features(target, [train, held], folder, taps, "target features")
    groups = length_groups(train_f, args.group_lengths) if args.group_lengths else None
    train_t, held_t = [e.tokens for e in train], [e.tokens for e in held]
    if not args.init:
        head_ids = ckpt["head_ids"] if ckpt else frequent_tokens(train, args.head_tokens, set(tok.stop_token_ids))
        torch.manual_seed(args.seed)
        head = EagleHead(target.cfg, head_ids, taps, final, args.layout, args.intermediate)
        if args.layout == "verispec":
            with torch.no_grad():
                head.decoder.norm.weight.copy_(target.norm.weight.float())   # start on the target's feature scale
    head.attach(target.embed.weight.float(), target.output_rows(head.head_ids).float())
    target = None                    # from here only its borrowed embedding and output rows are needed
    params = [p for n, p in head.named_parameters() if not n.startswith("decoder.embed")]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    step, wall, history = resume(ckpt, head, opt, "head")
    bar = StepBar(args.steps, step, "train-eagle")

    def train_round(start, stop):
        train_steps(head, opt, train_f, train_t, start, stop, args.steps, args.lr, args.batch, args.seed,
                    args.cls_weight, args.noise, lambda _, loss, __: bar.step(loss), args.bf16_autocast,
                    args.unroll, groups)

    def evaluate_and_save(step, wall):
        head.eval()
        with torch.no_grad():
            loss, parts = eagle_loss(head, *pad_batch(held_f, held_t, head), args.cls_weight)
        history.append({"step": step, "wall_s": round(wall, 1), "loss": round(float(loss), 4),
                        "top1": round(parts["top1"], 4), "reg": round(parts["reg"], 4), "kl": round(parts["kl"], 4)})
        bar.show(held=f"{float(loss):.3f}", top1=f"{parts['top1']:.3f}")
        save_checkpoint(ckpt_path, settings, head_ids=head_ids, head=head.state_dict(), optimizer=opt.state_dict(),
                        step=step, wall_s=wall, history=history)

    step, wall = train_in_rounds(step, min(args.steps, args.stop_at or args.steps), args.eval_every, wall,
                                 train_round, evaluate_and_save)
    bar.close()
    if step < args.steps:
        print(f"stopped at step {step} of {args.steps}; run the same command without --stop-at to resume")
        return 0
    head.eval()
    acc = draft_acceptance(head, held_f, held_t, ranks=min(8, len(head_ids)))
    info = (f"{args.data}: {len(train)} training / {len(held)} held-out sequences, "
            f"{sum(len(f) for f in train_f)} / {sum(len(f) for f in held_f)} positions")
    head.save(Path(args.out), model_card(args, feature_text(taps, final), info, acc, wall, history, len(head_ids)),
              {"acceptance": acc, "history": history})
    (work / "history.json").write_text(json.dumps(history, indent=1))
    print(f"EAGLE head written to {args.out}: held-out top-1 by depth " + ", ".join(f"{row[0]:.3f}" for row in acc))
    return 0
