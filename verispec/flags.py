"""Flag helpers shared by the command modules (a leaf: it imports no command module, and cli.py imports it)."""
from __future__ import annotations

import argparse
import math
import re

from .errors import VerispecError

# --draft-weights: a proposer's weights, "q4" (requantized to 4 bits, integer products: `model.requant`), "native"
# (as loaded) or "auto" (q4 wherever verispec's CPU kernels run: `api.draft_weights`)
DRAFT_WEIGHTS = ("auto", "q4", "native")


def int_at_least(lo: int):
    """An argparse type: an integer >= lo (a one-line error otherwise)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {text!r}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}, got {v}")
        return v
    return parse


def seed(text: str) -> int:
    """An argparse type: a random seed, an integer in [0, 2^63)."""
    v = int_at_least(0)(text)
    if v >= 2 ** 63:
        raise argparse.ArgumentTypeError(f"must be below 2^63, got {v}")
    return v


def float_in(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False):
    """An argparse type: a finite float in [lo, hi] (an end excluded where it is open; hi may be math.inf)."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        ok = math.isfinite(v) and (v > lo if lo_open else v >= lo) and (v < hi if hi_open else v <= hi)
        if not ok:
            span = (f"{'>' if lo_open else '>='} {lo:g}" if hi == math.inf
                    else f"in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}")
            raise argparse.ArgumentTypeError(f"must be a finite number {span}, got {text!r}")
        return v
    return parse


def device(text: str) -> str:
    """An argparse type: auto, cpu, cuda or cuda:N."""
    if text in ("auto", "cpu", "cuda") or re.fullmatch(r"cuda:\d+", text):
        return text
    raise argparse.ArgumentTypeError(f"must be auto, cpu, cuda or cuda:N, got {text!r}")


def parse_temperatures(text: str) -> list[float]:
    """--temperatures: comma-separated finite numbers >= 0, at least one (a one-line error otherwise)."""
    try:
        temps = [float(t) for t in text.split(",")]
    except ValueError:
        temps = []
    if not temps or not all(math.isfinite(t) and t >= 0 for t in temps):
        raise VerispecError(f"--temperatures must be comma-separated finite numbers >= 0, such as 0,0.7,1.0, "
                            f"got {text!r}")
    return temps


def parse_k(text: str) -> int | str:
    """An integer k >= 1, or "auto"."""
    text = str(text).strip()
    if text == "auto":
        return "auto"
    try:
        k = int(text)
    except ValueError:
        raise VerispecError(f"k must be an integer >= 1 or 'auto', got {text!r}") from None
    if k < 1:
        raise VerispecError(f"k must be >= 1 or 'auto', got {k}")
    return k


def method_names(value: str, speculative: bool = False) -> list[str]:
    """A --methods list, in order, each name once (without plain if `speculative`); empty is a one-line error."""
    names = [m for m in dict.fromkeys(part.strip() for part in value.split(",")) if m and not
             (speculative and m == "plain")]
    if not names:
        raise VerispecError("--methods is empty: name at least one " +
                            ("speculative method, e.g. ngram" if speculative else "method, e.g. plain,ngram"))
    return names


def check_decoding_flags(args) -> None:
    """Reject bad decoding flags before any model is loaded."""
    from .engine import GenerationConfig
    from .sampling import SamplingConfig
    GenerationConfig(max_new_tokens=args.max_new_tokens, k=args.k, k_max=args.k_max, acceptance=args.acceptance,
                     sampling=SamplingConfig(args.temperature, args.top_k, args.top_p))
    if getattr(args, "prompt", None) is not None and not args.prompt.strip():
        raise VerispecError("the prompt is empty")


def format_stats(method: str, s: dict) -> str:
    fmt = lambda x, spec=".2f": "-" if x is None else format(x, spec)  # noqa: E731
    by_pos = " ".join(fmt(a) for a in s["acceptance_by_position"])
    return "\n".join([
        f"[{method}{' (typical acceptance: LOSSY)' if s.get('lossy') else ''}] {s['new_tokens']} tokens in {s['time_total_s']:.2f}s = {s['tokens_per_s']:.1f} tok/s | "
        f"target passes {s['target_passes']} | MAT {fmt(s['mean_accepted_tokens'])}",
        f"  drafted {s['drafted_tokens']}, accepted {s['accepted_tokens']} | alpha {fmt(s['acceptance_rate'])}"
        f" (by position: {by_pos or '-'}) | accepted-length histogram {s['accepted_length_histogram']}",
        f"  time: prefill {s['time_prefill_s']:.2f}s, draft {s['time_draft_s']:.2f}s, "
        f"verify {s['time_verify_s']:.2f}s, other {s['time_other_s']:.2f}s"])
