"""Two builds of the kernels on the same prefill, interleaved round by round in one process (the VM's speed drifts
by 15-30% between runs, so separate runs cannot show a 10% change).

    python scripts/kernels_ab.py MODEL DTYPE N ROUNDS BUILD_DIR_A BUILD_DIR_B

A build directory is `verispec.kernels.build_dir()` of a checkout after one `kernels.load()`; for another
checkout: `PYTHONPATH=/path/to/it python -c "from verispec import kernels; kernels.load(); print(kernels.build_dir())"`.
Prefills the first N tokens of the first long prompt (../shared/data/prompts/long.jsonl) with each build in turn,
ROUNDS times, checks that both give the same hidden states bit for bit, and prints each build's median and B/A.
2 threads.
"""
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from verispec import kernels
from verispec.api import Target

PROMPTS = Path(__file__).resolve().parents[2] / "shared" / "data" / "prompts" / "long.jsonl"


def load_build(folder: Path):
    so = next(folder.glob("verispec_cpu_*.so"))
    spec = importlib.util.spec_from_file_location(so.name.split(".")[0], so)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@torch.inference_mode()
def main() -> int:
    torch.set_num_threads(2)
    if len(sys.argv) != 7:
        print("usage: " + next(line.strip() for line in __doc__.splitlines() if "python scripts" in line), file=sys.stderr)
        return 2
    model, dtype, n, rounds, *dirs = sys.argv[1:]
    n, rounds = int(n), int(rounds)
    builds = [load_build(Path(d)) for d in dirs]
    target = Target.load(model, dtype, "cpu")
    m = target.model
    tokens = target.tokenizer.encode(json.loads(PROMPTS.open().readline())["prompt"])[:n]
    n = len(tokens)
    times, outs = [[], []], [None, None]
    for r in range(rounds):
        for i in (0, 1) if r % 2 == 0 else (1, 0):
            kernels.load = lambda b=builds[i]: b
            m.layers.__dict__.pop("_stack", None)             # the one-call pass is built from kernels.load()
            cache = m.new_cache(n + 8)
            t0 = time.perf_counter()
            outs[i] = m(torch.tensor([tokens]), torch.arange(n)[None], cache)
            times[i].append(time.perf_counter() - t0)
    same = torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))
    a, b = (statistics.median(t) for t in times)
    print(f"{model} {dtype}, prefill of {n} tokens, median of {rounds}: A {a:.2f} s ({n / a:.0f} tok/s), "
          f"B {b:.2f} s ({n / b:.0f} tok/s), B/A {b / a:.2f}; same bits: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
