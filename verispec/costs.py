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


def primed_cache(model: Llama, context: int, room: int, g: torch.Generator):
    """A new cache holding the keys and values of `context` random tokens (drawn from `g`), with `room` more."""
    cache = model.new_cache(context + room)
    prefix = torch.randint(0, model.cfg.vocab_size, (1, context), generator=g).to(model.device)
    model(prefix, torch.arange(context, device=model.device)[None], cache)
    return cache


@torch.inference_mode()
def one_token_pass(model: Llama, context: int = 256):
    """A callable that runs one one-token pass (+ logits) of `model` after `context` cached random tokens."""
    device, g = model.device, torch.Generator().manual_seed(0)
    cache = primed_cache(model, context, 2, g)
    token = torch.randint(0, model.cfg.vocab_size, (1, 1), generator=g).to(device)
    position = torch.tensor([[context]], device=device)

    @torch.inference_mode()
    def run():
        cache.truncate(context)
        model.logits(model(token, position, cache))
        if device.type == "cuda":
            torch.cuda.synchronize()
    return run


def check_room(model: Llama, context: int, rows: int) -> None:
    """A one-line error, before any timing, where `context` cached tokens plus a pass of `rows` rows (and its
    root) do not fit the model's context."""
    from .errors import VerispecError
    if context < 1 or context + rows + 1 > model.cfg.max_position:
        raise VerispecError(f"--context {context} plus a pass of {rows} rows does not fit the model's context of "
                            f"{model.cfg.max_position} tokens")


@torch.inference_mode()
def cost_curve(model: Llama, ns: list[int], context: int = 256, repeats: int = 7) -> dict[int, float]:
    """Median seconds of one forward (+ logits) over n new tokens after `context` cached tokens, for each n."""
    return verify_times(model, ns, [], context, repeats)[0]


@torch.inference_mode()
def verify_times(model: Llama, ns: list[int], tree_sizes: list[int], context: int = 256,
                 repeats: int = 7, relative: bool = False) -> tuple[dict[int, float], dict[int, float]]:
    """Median seconds of one forward (+ logits) after `context` cached tokens: over chains of n new tokens for
    each n in `ns`, and over breadth-first trees of top-2 choices of n nodes (plus the root) for each n in
    `tree_sizes`. Every shape is timed once per round, so drift between rounds reaches them all alike (trees
    timed apart from the chains they are compared with came out 20-40% dearer on a busy VM, at the same rows).
    relative (1 in `ns`): each shape's median over rounds of its time over the one-token pass's in that round."""
    from .tree import build_tree, topk_per_depth
    device = model.device
    g = torch.Generator().manual_seed(0)
    cache = primed_cache(model, context, max([*ns, *(n + 1 for n in tree_sizes)]), g)
    full = topk_per_depth([2] * 8, max_nodes=1024)
    shapes = {}                                         # (kind, n) -> (tokens [1, m], positions [1, m], mask)
    for n in ns:
        shapes["chain", n] = (torch.randint(0, model.cfg.vocab_size, (1, n), generator=g).to(device),
                              torch.arange(context, context + n, device=device)[None], None)
    for n in tree_sizes:
        tree = build_tree(list(full.choices[:n]))       # breadth-first prefix: still a valid tree
        mask = torch.cat([torch.ones(n + 1, context, dtype=torch.bool), tree.ancestry], 1)[None].to(device)
        shapes["tree", n] = (torch.randint(0, model.cfg.vocab_size, (1, n + 1), generator=g).to(device),
                             (context + torch.tensor(tree.depths, device=device))[None], mask)
    times = {shape: [] for shape in shapes}
    for _ in range(repeats + 1):                       # the first round warms up and is discarded
        for shape, (tokens, positions, mask) in shapes.items():
            cache.truncate(context)
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.logits(model(tokens, positions, cache, mask))
            if device.type == "cuda":
                torch.cuda.synchronize()
            times[shape].append(time.perf_counter() - t0)
    if relative:       # each round's T(shape)/T(1), then the median over rounds: drift between rounds cancels
        times = {shape: [a / b for a, b in zip(t, times["chain", 1])] for shape, t in times.items()}
    median = {shape: statistics.median(t[1:]) for shape, t in times.items()}
    return ({n: median["chain", n] for n in ns}, {n: median["tree", n] for n in tree_sizes})


def cmd_cost_curve(args) -> int:
    import json

    from .api import Target
    from .errors import VerispecError
    from .files import atomic_file
    if args.max_n < 1 or args.context < 1 or args.repeats < 1:
        raise VerispecError("--max-n, --context and --repeats must be >= 1")
    if args.profile and not args.batch:
        raise VerispecError("--profile saves the batch curves of --batch: give --batch too (e.g. --batch 1,2,4,8)")
    sizes = parse_batch_sizes(args.batch) if args.batch else None   # bad sizes fail now, not after the timing
    target = Target.load(args.model, args.dtype, args.device, args.draft_weights)
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
    batch = measure_batches(args, target, curve[1], sizes) if sizes else None
    if args.json_out:
        with atomic_file(args.json_out) as f:
            json.dump({"dtype": args.dtype, "device": str(target.model.device), "context": args.context,
                       "seconds": {str(n): t for n, t in curve.items()},
                       "relative": {str(n): curve[n] / curve[1] for n in ns}, "draft_cost_c": draft_cost,
                       "batch": batch}, f, indent=1)
    return 0


def parse_batch_sizes(text: str) -> list[int]:
    """'1,2,4,8' -> [1, 2, 4, 8]: distinct batch sizes in 1..256, ascending. Bad input raises VerispecError."""
    from .errors import VerispecError
    try:
        sizes = sorted({int(b) for b in str(text).split(",")})      # (an empty item is no size: ValueError)
    except ValueError:
        raise VerispecError(f"--batch takes batch sizes such as 1,2,4,8,16, got {text!r}") from None
    if not sizes or sizes[0] < 1 or sizes[-1] > 256:
        raise VerispecError("--batch sizes must be in 1..256")
    return sizes


def measure_batches(args, target, t1: float, sizes: list[int]) -> dict:
    """`cost-curve --batch`: the packed-pass curve for each batch size; saved into a cost profile with --profile."""
    ns = list(range(1, args.max_n + 1))
    table = batch_cost_curve(target.model, sizes, ns, args.context, args.repeats)
    print("\npacked passes of B sequences, n tokens each: T_B(n)/T_B(1), and T_B(1)/T_1(1)")
    print(f"{'B':>3} {'T_B(1)/T_1(1)':>14} " + " ".join(f"{n:>5}" for n in ns))
    for b in sizes:
        print(f"{b:>3} {table[b][1] / t1:>14.2f} " + " ".join(f"{table[b][n] / table[b][1]:>5.2f}" for n in ns))
    curve = {b: {n: table[b][n] / table[b][1] for n in ns} for b in sizes}
    scale = {b: table[b][1] / t1 for b in sizes}
    if args.profile:
        from pathlib import Path

        from .autok import CostProfile
        profile = CostProfile.load(args.profile) if Path(args.profile).exists() else target.profile()
        profile.batch_curve, profile.batch_scale = curve, scale
        profile.save(args.profile)
        print(f"batch cost curves saved into {args.profile}")
    return {"curve": {str(b): {str(n): v for n, v in row.items()} for b, row in curve.items()},
            "scale": {str(b): v for b, v in scale.items()}}


@torch.inference_mode()
def batch_cost_curve(model: Llama, batches: list[int], ns: list[int], context: int = 256,
                     repeats: int = 5) -> dict[int, dict[int, float]]:
    """Median seconds of one packed pass (+ logits) of B sequences with n new tokens each, for each B and n.

    Each sequence has `context` cached tokens of its own; the pass is `Llama.forward_packed`, as the serving
    batch runs it (for B = 1, a plain forward)."""
    device, g = model.device, torch.Generator().manual_seed(0)
    caches = [primed_cache(model, context, max(ns), g) for _ in range(max(batches))]
    positions = {n: torch.arange(context, context + n, device=device)[None] for n in ns}
    times = {b: {n: [] for n in ns} for b in batches}
    for _ in range(repeats + 1):                       # the first round warms up and is discarded
        for b in batches:
            for n in ns:
                for cache in caches[:b]:
                    cache.truncate(context)
                segments = [(torch.randint(0, model.cfg.vocab_size, (1, n), generator=g).to(device), positions[n],
                             cache, None) for cache in caches[:b]]
                if device.type == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                model.logits(torch.cat(model.forward_packed(segments), 1))
                if device.type == "cuda":
                    torch.cuda.synchronize()
                times[b][n].append(time.perf_counter() - t0)
    return {b: {n: statistics.median(t[1:]) for n, t in row.items()} for b, row in times.items()}
