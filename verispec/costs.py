"""The verify cost curve: wall time of one target pass over n new tokens, relative to n = 1.

Speculation pays because a pass over k + 1 tokens costs little more than a pass over one while decoding is
memory-bound. This measures by how much more, on this machine: T(n) / T(1) for chains of n tokens appended to a
context of fixed length. Each point is the median of `repeats` timed passes, interleaved across n to spread noise.
"""
from __future__ import annotations

import statistics
import time

import torch

from .model.llama import Llama


@torch.inference_mode()
def cost_curve(model: Llama, ns: list[int], context: int = 256, repeats: int = 7) -> dict[int, float]:
    """Median seconds of one forward (+ logits) over n new tokens after `context` cached tokens, for each n."""
    device = model.device
    cache = model.new_cache(context + max(ns))
    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, model.cfg.vocab_size, (1, context), generator=g).to(device)
    model(prefix, torch.arange(context, device=device)[None], cache)
    times = {n: [] for n in ns}
    for _ in range(repeats + 1):                       # the first round warms up and is discarded
        for n in ns:
            cache.truncate(context)
            tokens = torch.randint(0, model.cfg.vocab_size, (1, n), generator=g).to(device)
            positions = torch.arange(context, context + n, device=device)[None]
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.logits(model(tokens, positions, cache))
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[n].append(time.perf_counter() - t0)
    return {n: statistics.median(t[1:]) for n, t in times.items()}


def cmd_cost_curve(args) -> int:
    import json

    from .api import Target
    from .errors import VerispecError
    from .files import atomic_file
    if args.max_n < 1 or args.context < 1 or args.repeats < 1:
        raise VerispecError("--max-n, --context and --repeats must be >= 1")
    target = Target.load(args.model, args.dtype, args.device)
    if args.context + args.max_n > target.model.cfg.max_position:
        raise VerispecError("--context plus --max-n exceeds the model's context")
    ns = list(range(1, args.max_n + 1))
    curve = cost_curve(target.model, ns, args.context, args.repeats)
    print(f"verify cost curve ({args.dtype}, {target.model.device}, context {args.context}, "
          f"median of {args.repeats}):")
    print(f"{'n':>3} {'ms':>8} {'T(n)/T(1)':>10}")
    for n in ns:
        print(f"{n:>3} {curve[n] * 1e3:>8.2f} {curve[n] / curve[1]:>10.2f}")
    draft_cost = None
    if args.draft:
        from .api import make_proposer
        draft = make_proposer("draft", target, None if args.draft == "default" else args.draft).model
        step = cost_curve(draft, [1], args.context, args.repeats)[1]
        draft_cost = step / curve[1]
        print(f"draft step: {step * 1e3:.2f} ms -> c = {draft_cost:.3f} of a target pass")
    if args.json_out:
        with atomic_file(args.json_out) as f:
            json.dump({"dtype": args.dtype, "device": str(target.model.device), "context": args.context,
                       "seconds": {str(n): t for n, t in curve.items()},
                       "relative": {str(n): curve[n] / curve[1] for n in ns}, "draft_cost_c": draft_cost}, f,
                      indent=1)
    return 0
