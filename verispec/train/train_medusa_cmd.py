"""The `verispec train-medusa` command: data -> target features -> heads (resumable) -> heads folder + trees."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import torch

from ..errors import VerispecError
from ..model.medusa import MedusaHeads
from ..proposers.medusa import TREE_SIZES
from ..tree import tree_from_acceptance
from .data import frequent_tokens, row_index
from .features import store_folder, stored_features, target_settings
from .medusa import RANKS, acceptance, head_targets, kl_loss, train_steps
from .progress import StepBar
from .workdir import data_settings, load_checkpoint, resume, save_checkpoint, start_run, train_in_rounds


def trees_json(acc: list[list[float]]) -> dict:
    out = {"acceptance": acc, "trees": {}}
    for n in TREE_SIZES:
        tree, expected = tree_from_acceptance(acc, n)
        out["trees"][str(n)] = {"expected_accepted": expected, "paths": [list(c) for c in tree.choices]}
    return out


def model_card(args, info: str, acc: list[list[float]], trees: dict, wall_s: float, history: list) -> str:
    lines = [f"# verispec Medusa heads: {Path(args.out).name}", "",
             "Medusa heads for speculative decoding, trained on the frozen target's last hidden states over its "
             "own answers.", "", "```", "verispec " + " ".join(shlex.quote(a) for a in sys.argv[1:]), "```", "",
             f"- target: {args.model or 'SmolLM2-135M-Instruct (verispec default)'}",
             f"- heads: {args.heads} residual blocks (D x D + D each), output = the target's embedding rows of "
             f"the {args.head_tokens} most frequent answer tokens (borrowed, not stored)",
             f"- training: {args.steps} steps x {args.batch} rows, lr {args.lr}, seed {args.seed}, KL to the "
             "target's top-32 probabilities",
             f"- data: {info}", f"- wall time: {wall_s / 60:.1f} min on {torch.get_num_threads()} CPU threads", "",
             "Held-out accuracy (training-split prompts kept aside; hit = the head's rank-r choice is the target's "
             "greedy token there, over all rows, not only those where the earlier heads were right; the default "
             "trees multiply these as if independent):", "",
             "| head | predicts | top-1 | top-3 | top-5 | top-8 |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for d, row in enumerate(acc):
        cum = [sum(row[:r]) for r in (1, 3, 5, 8)]
        lines.append(f"| {d + 1} | token t+{d + 2} | " + " | ".join(f"{c:.3f}" for c in cum) + " |")
    lines += ["", "Default trees grown from these accuracies (expected accepted tokens per cycle, greedy):", "",
              "| nodes | depth | expected accepted |", "| ---: | ---: | ---: |"]
    for n, t in trees["trees"].items():
        lines.append(f"| {n} | {max(len(p) for p in t['paths'])} | {t['expected_accepted']:.2f} |")
    lines += ["", "Held-out loss during training: " + ", ".join(f"step {h['step']}: {h['loss']:.3f}"
                                                                for h in history), ""]
    return "\n".join(lines)


def cmd_train_medusa(args) -> int:
    if not 1 <= args.heads <= 32 or args.steps < 1 or args.batch < 1:      # --eval-every: a typed flag
        raise VerispecError("need --heads in 1..32, --steps and --batch >= 1")
    train, held, target, tok, work = start_run(args)
    feature_settings = data_settings(args)
    settings = {**feature_settings, "heads": args.heads, "head_tokens": args.head_tokens, "steps": args.steps,
                "batch": args.batch, "lr": args.lr, "seed": args.seed}
    ckpt_path = work / "checkpoint.pt"
    ckpt = load_checkpoint(ckpt_path, settings)                      # (refused before any features)
    folder = store_folder(args.data, work, target_settings(args.model, args.dtype, ()))
    whole = stored_features(target, [train, held], folder, desc="target features")
    train_f, held_f = (torch.cat([f[e.first - 1:] for f, e in zip(fs, es)])          # [answer rows, D]
                       for fs, es in zip(whole, (train, held)))
    del whole                                                # (the prompts' rows: not needed from here)
    head_ids = ckpt["head_ids"] if ckpt else frequent_tokens(train, args.head_tokens, set(tok.stop_token_ids))
    head_index = row_index(head_ids, target.cfg.vocab_size)
    ids, probs, _ = head_targets(train, args.heads, head_index)
    held_ids, held_probs, held_greedy = head_targets(held, args.heads, head_index)
    torch.manual_seed(args.seed)
    heads = MedusaHeads(args.heads, target.cfg.hidden_size, head_ids).attach(target.output_rows(head_ids).float())
    target = None                    # from here only its borrowed output rows are needed
    opt = torch.optim.AdamW(heads.blocks.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    step, wall, history = resume(ckpt, heads, opt, "heads")

    bar = StepBar(args.steps, step, "train-medusa")
    on_step = lambda _, loss, __: bar.step(loss)  # noqa: E731

    def evaluate_and_save(step, wall):
        heads.eval()
        with torch.no_grad():
            held_loss = float(kl_loss(heads(held_f.float()), held_ids, held_probs))
        top1 = [row[0] for row in acceptance(heads, held_f.float(), held_greedy, 1)]
        history.append({"step": step, "wall_s": round(wall, 1), "loss": round(held_loss, 4),
                        "top1": [round(a, 4) for a in top1]})
        bar.show(held=f"{held_loss:.3f}", top1="/".join(f"{a:.2f}" for a in top1))
        save_checkpoint(ckpt_path, settings, head_ids=head_ids, heads=heads.state_dict(),
                        optimizer=opt.state_dict(), step=step, wall_s=wall, history=history)

    step, wall = train_in_rounds(
        step, args.steps, args.eval_every, wall,
        lambda start, stop: train_steps(heads, opt, train_f, ids, probs, start, stop, args.steps, args.lr,
                                        args.batch, args.seed, on_step),
        evaluate_and_save)
    bar.close()
    acc = acceptance(heads, held_f.float(), held_greedy, min(RANKS, args.head_tokens))
    trees = trees_json(acc)
    info = (f"{args.data}: {len(train)} training / {len(held)} held-out answers, {len(train_f)} / "
            f"{len(held_f)} answer positions")
    heads.save(Path(args.out), model_card(args, info, acc, trees, wall, history), trees)
    (work / "history.json").write_text(json.dumps(history, indent=1))
    print(f"Medusa heads written to {args.out}: held-out top-1 " +
          ", ".join(f"head {d + 1} {row[0]:.3f}" for d, row in enumerate(acc)))
    return 0
