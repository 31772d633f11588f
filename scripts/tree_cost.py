"""Verify cost: T(pass)/T(1) for chains of k = 1..8 draft tokens (k + 1 rows) and for breadth-first top-2 token
trees of 4, 8, 16, 32 and 64 nodes (+ root), after CONTEXT cached tokens (default 256), medians of 15 passes,
default model. Run it from two checkouts to compare versions side by side:

    python scripts/tree_cost.py [DTYPE [CONTEXT]] [--engine-rows]      (bf16, the default; bf16a, fp32, gguf or gguf-q8)
    PYTHONPATH=/path/to/other/checkout python scripts/checkout_run.py scripts/tree_cost.py
    VERISPEC_ISA=avx512 python scripts/tree_cost.py gguf-q8      (the integer product kept off AMX)

Trees get a dense mask over the whole cache; --engine-rows passes the row plan the engine passes (`tree_rows`).
"""
import statistics
import sys
import time

import torch

from verispec.api import Target
from verispec.engine import tree_rows
from verispec.tree import build_tree, topk_per_depth


def median_time(fn, repeats=15):
    times = []
    for _ in range(repeats + 1):                      # the first call warms up
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])


@torch.inference_mode()
def main(context=256, dtype="bf16", engine_rows=False):
    model = Target.load(None, dtype, "cpu").model
    cache = model.new_cache(context + 80)
    model(torch.randint(0, 1000, (1, context)), torch.arange(context)[None], cache)

    def run(tokens, positions, mask=None):
        cache.truncate(context)
        model.logits(model(tokens, positions, cache, mask))

    base = median_time(lambda: run(torch.randint(0, 1000, (1, 1)), torch.tensor([[context]])))
    print(f"plain step {base * 1e3:.1f} ms ({dtype}, {torch.get_num_threads()} threads, {context} cached tokens)",
          flush=True)
    for k in range(1, 9):
        t = median_time(lambda: run(torch.randint(0, 1000, (1, k + 1)), torch.arange(context, context + k + 1)[None]))
        print(f"chain k={k}: {t / base:.2f}", flush=True)
    full = topk_per_depth([2] * 8, max_nodes=1024)
    for n in (4, 8, 16, 32, 64):
        tree = build_tree(list(full.choices[:n]))
        tokens = torch.randint(0, 1000, (1, n + 1))
        positions = (context + torch.tensor(tree.depths))[None]
        mask = tree_rows(tree) if engine_rows else \
            torch.cat([torch.ones(n + 1, context, dtype=torch.bool), tree.ancestry], 1)[None]
        print(f"tree {n} nodes: {median_time(lambda: run(tokens, positions, mask)) / base:.2f}", flush=True)


if __name__ == "__main__":
    engine_rows = "--engine-rows" in sys.argv[1:]
    sys.argv = [a for a in sys.argv if a != "--engine-rows"]
    dtype = sys.argv[1] if len(sys.argv) > 1 else "bf16"
    if dtype not in ("bf16", "bf16a", "fp32", "gguf", "gguf-q8"):
        sys.exit(f"tree_cost.py: DTYPE must be bf16, bf16a, fp32, gguf or gguf-q8, got {dtype!r}")
    context = sys.argv[2] if len(sys.argv) > 2 else "256"
    if not context.isdigit() or not 1 <= int(context) <= 8000:
        sys.exit(f"tree_cost.py: CONTEXT must be 1 to 8000 cached tokens, got {context!r}")
    main(int(context), dtype, engine_rows)
