"""Flag helpers shared by the command modules (a leaf: it imports no command module, and cli.py imports it)."""
from __future__ import annotations

from .errors import VerispecError

# --draft-weights: a proposer's weights, "q4" (requantized to 4 bits, integer products: `model.requant`), "native"
# (as loaded) or "auto" (q4 where verispec's kernels run beside a quantized target, or beside a float one with the
# integer product on AMX: `api.draft_weights`)
DRAFT_WEIGHTS = ("auto", "q4", "native")


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
