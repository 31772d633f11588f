"""The bf16 product on AMX-BF16 tiles against the AVX-512 product, in one process, interleaved (the float product's
instruction set switched between rounds; bf16 panels re-laid out on each switch), default model, bf16:

    python scripts/amx_ab.py pass NODES CONTEXT STEPS ROUNDS    a plain step (NODES 0) or a verification pass of a
                                                                breadth-first top-2 tree of NODES nodes (+ root)
                                                                after CONTEXT cached tokens, STEPS passes a round
    python scripts/amx_ab.py prefill TOKENS ROUNDS              a prefill of TOKENS random tokens (+ last logits)

Medians of the rounds' mean pass times. On a machine without AMX-BF16 both sides are the AVX-512 product.
"""
import statistics
import sys
import time

import torch

from verispec import kernels
from verispec.api import Target
from verispec.tree import build_tree, topk_per_depth


def tree_pass(model, nodes: int, context: int):
    """A function running one verification pass of `nodes` tree nodes (0: one plain step) after `context` tokens."""
    cache = model.new_cache(context + nodes + 8)
    model(torch.randint(0, 1000, (1, context)), torch.arange(context)[None], cache)
    if nodes:
        tree = build_tree(list(topk_per_depth([2] * 8, max_nodes=1024).choices[:nodes]))
        tokens = torch.randint(0, 1000, (1, nodes + 1))
        positions = (context + torch.tensor(tree.depths))[None]
        mask = torch.cat([torch.ones(nodes + 1, context, dtype=torch.bool), tree.ancestry], 1)[None]
    else:
        tokens, positions, mask = torch.tensor([[5]]), torch.tensor([[context]]), None

    def run():
        cache.truncate(context)
        model.logits(model(tokens, positions, cache, mask))
    return run


def prefill(model, n: int):
    tokens = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(0))

    def run():
        cache = model.new_cache(n + 8)
        model.logits(model(tokens, torch.arange(n)[None], cache)[:, -1:])
    return run


@torch.inference_mode()
def main(argv):
    lib = kernels.load()
    if lib is None:
        sys.exit(f"amx_ab.py: the kernels are unavailable here: {kernels.status()}")
    model = Target.load(None, "bf16", "cpu").model
    if argv[0] == "pass":
        nodes, context, steps, rounds = (int(a) for a in argv[1:5])
        run, what = tree_pass(model, nodes, context), f"{nodes}-node tree" if nodes else "plain step"
        what += f" after {context} tokens"
    else:
        tokens, rounds = int(argv[1]), int(argv[2])
        run, steps, what = prefill(model, tokens), 1, f"prefill of {tokens} tokens"
    times = {"avx512": [], "best": []}
    for r in range(rounds):
        for isa in ("avx512", "best") if r % 2 == 0 else ("best", "avx512"):
            lib.set_fp_isa(isa)
            run()                                           # warm: the switch re-lays out the bf16 panels
            t0 = time.perf_counter()
            for _ in range(steps):
                run()
            times[isa].append((time.perf_counter() - t0) * 1000 / steps)
    lib.set_fp_isa("best")
    a, b = statistics.median(times["avx512"]), statistics.median(times["best"])
    print(f"{what}: avx512 {a:.2f} ms, {lib.fp_isa()} {b:.2f} ms, ratio {b / a:.3f}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    ok = (len(args) == 5 and args[0] == "pass") or (len(args) == 3 and args[0] == "prefill")
    if not ok or not all(a.isdigit() for a in args[1:]) or int(args[-1]) < 1:
        sys.exit("usage: amx_ab.py pass NODES CONTEXT STEPS ROUNDS | prefill TOKENS ROUNDS (whole numbers)")
    main(args)
