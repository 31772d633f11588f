"""The store of laid-out chunks (`KVCache.panels`) on and off, interleaved round by round in one process: a
prefill of N random tokens (default 3,000), then passes of 1, 5 and 16 new rows after it (logits excluded), each
the median of 5, over 5 rounds; checks that both give the same hidden states. The default model in DTYPE (bf16a,
the default: its pair panels; bf16 on a CPU with AMX-BF16: its packed tiles), 2 threads:

    python scripts/kv_panels_ab.py [N [DTYPE]]
"""
import statistics
import sys
import time

import torch

from verispec.api import Target
from verispec.model import ops


@torch.inference_mode()
def main() -> int:
    torch.set_num_threads(2)
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    dtype = sys.argv[2] if len(sys.argv) > 2 else "bf16a"
    model = Target.load(None, dtype, "cpu").model
    stores = ops.Rows.stores

    def use(on: bool):
        ops.Rows.stores = stores if on else (lambda self, pairs: ())

    ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(0))
    times, caches, outs = {}, {}, {}
    for _ in range(3):
        for on in (False, True):
            use(on)
            cache = model.new_cache(n + 64)
            t0 = time.perf_counter()
            outs[on] = model(ids, torch.arange(n)[None], cache)
            times.setdefault(("prefill", on), []).append(time.perf_counter() - t0)
            caches[on] = cache
    same = torch.equal(outs[False], outs[True])
    for _ in range(5):
        for rows in (1, 5, 16):
            tokens = torch.randint(0, 1000, (1, rows))
            for on in (False, True):
                use(on)
                step = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    outs[on] = model(tokens, torch.arange(n, n + rows)[None], caches[on])
                    step.append(time.perf_counter() - t0)
                    caches[on].truncate(n)
                times.setdefault((rows, on), []).append(statistics.median(step))
            same = same and torch.equal(outs[False], outs[True])
    use(True)
    for key in ("prefill", 1, 5, 16):
        off, on = (statistics.median(times[(key, o)]) * 1e3 for o in (False, True))
        what = f"prefill of {n}" if key == "prefill" else f"{key} rows after {n}"
        print(f"{dtype} {what:>18}: store off {off:8.2f} ms, on {on:8.2f} ms, on/off {on / off:.2f}")
    print(f"same bits: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
