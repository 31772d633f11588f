"""The training commands' flags (distill-data, train-draft, train-medusa, train-eagle), added to the `verispec`
parser by `cli.build_parser`."""
from __future__ import annotations

import argparse
import math

from ..flags import float_in, int_at_least, seed


def _head_training_flags(p: argparse.ArgumentParser, what: str, batch: int, batch_help: str,
                         eval_examples: int) -> None:
    """Flags shared by the commands that train on the target's features (train-medusa, train-eagle)."""
    p.add_argument("--data", required=True, help="a distill-data folder")
    p.add_argument("--out", required=True,
                   help=f"output {what} (checkpoints go to OUT.work/; the target's features to DATA/features/)")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument("--model", help="the target the data came from (default: SmolLM2-135M)")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16", help="the target's dtype for features")
    p.add_argument("--head-tokens", type=int_at_least(1), default=8192,
                   help="output vocabulary: the most frequent tokens (with --init: the initial head's, kept)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--batch", type=int, default=batch, help=batch_help)
    p.add_argument("--lr", type=float_in(0, math.inf, lo_open=True), default=1e-3)
    p.add_argument("--max-answers", type=int_at_least(1), default=None, help="use at most this many training answers")
    p.add_argument("--max-tokens", type=int_at_least(16), default=320, help="longest sequence fed to the target")
    p.add_argument("--eval-every", type=int_at_least(1), default=100, help="held-out evaluation + checkpoint interval")
    p.add_argument("--eval-examples", type=int_at_least(1), default=eval_examples)
    p.add_argument("--seed", type=seed, default=0)


def shard_range(text: str) -> tuple[int, int]:
    """An argparse type: 'A:B', batches A to B-1 of distill-data's plan (0 <= A < B)."""
    a, sep, b = text.partition(":")
    try:
        lo, hi = int(a), int(b)
    except ValueError:
        lo = hi = -1
    if not sep or lo < 0 or hi <= lo:
        raise argparse.ArgumentTypeError(f"must be A:B with 0 <= A < B, got {text!r}")
    return lo, hi


def add_train_parsers(sub, model_flags) -> None:
    """The four training sub-commands; `model_flags` adds --model / --draft / --dtype / --device to a parser."""
    dd = sub.add_parser("distill-data", help="the target answers training prompts: data for a draft (resumable)")
    dd.add_argument("--prompts", nargs="+", required=True, help="JSONL prompt files (the dev split is skipped)")
    dd.add_argument("--out", required=True, help="output folder (shards + manifest.json)")
    dd.add_argument("--per-category", type=int_at_least(1), default=None, help="at most this many prompts per category")
    dd.add_argument("--batch", type=int, default=16)
    dd.add_argument("--max-new-tokens", type=int, default=192)
    dd.add_argument("--max-prompt-tokens", type=int_at_least(1), default=384, help="keep the last N prompt tokens")
    dd.add_argument("--temperatures", default="0,0.7,1.0", help="assigned to prompts in turn (0 = greedy)")
    dd.add_argument("--top-k-probs", type=int, default=32, help="target probabilities kept per position")
    dd.add_argument("--seed", type=seed, default=0)
    dd.add_argument("--shards", type=shard_range, default=None, metavar="A:B",
                    help="answer only the plan's batches A to B-1 (split one run across machines; same shards)")
    model_flags(dd)

    td = sub.add_parser("train-draft", help="distil a small draft model from distill-data output (resumable)")
    td.add_argument("--data", required=True, help="a distill-data folder")
    td.add_argument("--out", required=True, help="output model folder (checkpoints go to OUT.work/)")
    td.add_argument("--force", action="store_true", help="replace OUT if it exists")
    td.add_argument("--model", help="the target the data came from (default: SmolLM2-135M)")
    td.add_argument("--layers", type=int_at_least(1), default=4)
    td.add_argument("--hidden", type=int_at_least(1), default=256)
    td.add_argument("--heads", type=int_at_least(1), default=4)
    td.add_argument("--kv-heads", type=int_at_least(1), default=2)
    td.add_argument("--intermediate", type=int_at_least(1), default=768)
    td.add_argument("--head-tokens", type=int_at_least(0), default=8192, help="reduced output vocabulary (0 = full)")
    td.add_argument("--from-target", action="store_true",
                    help="start from the target's first --layers blocks at its width, borrowing its embedding")
    td.add_argument("--loss", default="kl", help="kl | tvd | kl+tvd | ce (ce = no distillation)")
    td.add_argument("--steps", type=int, default=2000)
    td.add_argument("--tokens-per-batch", type=int_at_least(1), default=4096)
    td.add_argument("--lr", type=float_in(0, math.inf, lo_open=True), default=2e-3)
    td.add_argument("--warmup", type=int_at_least(0), default=100)
    td.add_argument("--max-tokens", type=int_at_least(16), default=320, help="longest training sequence")
    td.add_argument("--stop-at", type=int, default=None,
                    help="stop after this step (a multiple of --eval-every) and write the draft; the learning-rate "
                         "schedule still spans --steps, so a later run without it resumes and finishes")
    td.add_argument("--eval-every", type=int_at_least(1), default=100, help="held-out evaluation + checkpoint interval")
    td.add_argument("--eval-examples", type=int_at_least(1), default=120)
    td.add_argument("--seed", type=seed, default=0)

    tm = sub.add_parser("train-medusa", help="train Medusa heads on the target's hidden states (resumable)")
    _head_training_flags(tm, "heads folder", batch=512, batch_help="hidden-state rows per step", eval_examples=120)
    tm.add_argument("--heads", type=int, default=4, help="number of heads K (head i guesses token t + i + 1)")

    te = sub.add_parser("train-eagle", help="train an EAGLE head on the target's features (resumable)")
    _head_training_flags(te, "head folder", batch=8, batch_help="sequences per step", eval_examples=60)
    te.add_argument("--intermediate", type=int, default=None,
                    help="the head's SwiGLU width (default: the target's; e.g. 2048 for a 1.5B target)")
    te.add_argument("--cls-weight", type=float_in(0, math.inf), default=0.1, help="weight of the KL term (EAGLE: 0.1)")
    te.add_argument("--noise", type=float_in(0, math.inf), default=0.1, help="uniform noise on input features (EAGLE: 0.1)")
    te.add_argument("--group-lengths", type=int_at_least(0), default=0, metavar="TOKENS",
                    help="draw each batch's sequences from one span of TOKENS lengths (0: any lengths; long "
                         "sequences among short ones then pad only their own batches)")
    te.add_argument("--unroll", type=int, default=1, help="training-time test: also learn from the head's own "
                                                          "predictions, N draft steps deep (1 = teacher-forced)")
    te.add_argument("--feature-layers", default="final", help="target features the head reads: 'final' (the "
                                                                  "final-normed state), or decoder layers fused, "
                                                                  "e.g. 2,15,29 or 2,15,final (measurement only)")
    te.add_argument("--layout", choices=("verispec", "eagle1"), default="verispec",
                    help="verispec: input and final norms; eagle1: EAGLE-1's layout (neither), the one vLLM's and "
                         "SGLang's EAGLE run, so `verispec export --format vllm` carries it exactly")
    te.add_argument("--init", metavar="HEAD", help="start from a trained head folder (fine-tuning; its head tokens)")
    te.add_argument("--stop-at", type=int, default=None, help="stop after this step's checkpoint (resume later)")
    te.add_argument("--bf16-autocast", action="store_true", help="train under bf16 autocast (faster on CPUs with "
                                                                  "bf16 matrix units; weights stay fp32)")
