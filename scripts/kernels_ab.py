"""Two builds of the kernels on the same prefill, interleaved round by round in one process (the VM's speed drifts
by 15-30% between runs, so separate runs cannot show a 10% change).

    python scripts/kernels_ab.py MODEL DTYPE N ROUNDS BUILD_DIR_A BUILD_DIR_B [--rows=R1,R2,...] [--other-bits]

A build directory is `verispec.kernels.build_dir()` of a checkout after one `kernels.load()`; for another
checkout: `PYTHONPATH=/path/to/it python scripts/checkout_run.py FILE` with FILE holding `from verispec import kernels;
kernels.load(); print(kernels.build_dir())` (plain PYTHONPATH is shadowed by the venv's editable install).
Prefills the first N tokens of the first long prompt that has N (../shared/data/prompts/long.jsonl; else the
longest) with each build in turn, ROUNDS times, checks that both give the same hidden states bit for bit, and prints
each build's median and B/A.
--rows: instead, after that prefill, passes of R new rows each (decoding, verification; logits included), each
build in turn. --other-bits: the builds are meant to compute differently (a change of numerics), so differing bits
are reported, not a failure. 2 threads.
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
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    rows = next((a.split("=", 1)[1] for a in flags if a.startswith("--rows=")), None)
    if len(args) != 6 or any(a != "--other-bits" and not a.startswith("--rows=") for a in flags):
        print("usage: " + next(line.strip() for line in __doc__.splitlines() if "python scripts" in line), file=sys.stderr)
        return 2
    model, dtype, n, rounds, *dirs = args
    n, rounds = int(n), int(rounds)
    builds = [load_build(Path(d)) for d in dirs]
    target = Target.load(model, dtype, "cpu")
    m = target.model
    tokens = []
    for line in PROMPTS.open():                             # the first long prompt with N tokens (or the longest)
        encoded = target.tokenizer.encode(json.loads(line)["prompt"])
        tokens = encoded if len(encoded) > len(tokens) else tokens
        if len(tokens) >= n:
            break
    tokens = tokens[:n]
    n = len(tokens)

    def use(i):
        kernels.load = lambda b=builds[i]: b
        m.layers.__dict__.pop("_stack", None)                 # the one-call pass is built from kernels.load()

    def prefill():
        cache = m.new_cache(n + 80)
        return m(torch.tensor([tokens]), torch.arange(n)[None], cache), cache

    def step(cache, r):
        h = m(torch.tensor([tokens[-r:]]), torch.arange(n, n + r)[None], cache)
        out = m.logits(h)
        cache.truncate(n)
        return out

    same = True
    for r in [int(x) for x in rows.split(",")] if rows else [None]:
        times, outs, caches = [[], []], [None, None], [None, None]
        if r is not None:
            for i in (0, 1):
                use(i)
                caches[i] = prefill()[1]
        for k in range(rounds):
            for i in (0, 1) if k % 2 == 0 else (1, 0):
                use(i)
                t0 = time.perf_counter()
                outs[i] = prefill()[0] if r is None else step(caches[i], r)
                times[i].append(time.perf_counter() - t0)
        bits = torch.equal(outs[0].view(torch.int32), outs[1].view(torch.int32))
        same &= bits
        a, b = (statistics.median(t) for t in times)
        what = f"prefill of {n} tokens" if r is None else f"passes of {r} rows after {n} tokens"
        print(f"{model} {dtype}, {what}, median of {rounds}: A {a * 1e3:.1f} ms, B {b * 1e3:.1f} ms, B/A {b / a:.2f}; "
              f"same bits: {bits}", flush=True)
    return 0 if same or "--other-bits" in flags else 1


if __name__ == "__main__":
    sys.exit(main())
