"""Decoding step time with every layer in one kernel call (`fused.stack`, kernels/stack.cpp) against the layers
called one by one from Python (as before it; forced here by a no-op forward hook on one layer), interleaved step by
step in one process so that the machine's drift falls on both alike: median ms of 1 row and of 5 rows after 256
cached tokens, 2 threads. Same bits either way (tests/test_invariance.py).

    python scripts/stack_speed.py [MODEL [DTYPE [STEPS]]]      (default model, bf16, 200 steps of each)
"""
import statistics
import sys
import time

import torch

from verispec.api import Target
from verispec.errors import VerispecError


@torch.inference_mode()
def main(name=None, dtype="bf16", steps=200, context=256):
    torch.set_num_threads(2)
    model = Target.load(name, dtype, "cpu").model
    cache = model.new_cache(context + 8)
    model(torch.randint(0, 1000, (1, context)), torch.arange(context)[None], cache)
    hook = [None]

    def step(n, one_by_one):
        if one_by_one and hook[0] is None:
            hook[0] = model.layers[0].register_forward_hook(lambda *args: None)
        elif not one_by_one and hook[0] is not None:
            hook[0].remove()
            hook[0] = None
        cache.truncate(context)
        t0 = time.perf_counter()
        model.logits(model(torch.full((1, n), 5), (context + torch.arange(n))[None], cache))
        return time.perf_counter() - t0

    print(f"{name or 'default model'} {dtype}, {steps} interleaved steps of each, 2 threads")
    for n in (1, 5):
        for mode in (False, True):
            step(n, mode)
        times = {False: [], True: []}
        for _ in range(steps):
            for mode in (False, True):
                times[mode].append(step(n, mode))
        one, fused = statistics.median(times[True]), statistics.median(times[False])
        print(f"{n} row{'s' if n > 1 else ''}: layer by layer {one * 1e3:.2f} ms, one call {fused * 1e3:.2f} ms, "
              f"{one / fused:.3f}x", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) > 2 and not (args[2].isdigit() and int(args[2]) > 0):
        sys.exit(f"stack_speed.py: STEPS must be a positive whole number, got {args[2]!r}")
    try:
        main(None if not args or args[0] == "default" else args[0], args[1] if len(args) > 1 else "bf16",
             int(args[2]) if len(args) > 2 else 200)
    except VerispecError as e:
        sys.exit(f"stack_speed.py: {e}")
