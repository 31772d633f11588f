"""What holds memory after the fault test with the prefix cache on (session 58): the live tensors' storages by
shape and dtype after `run_faults` (two rounds), against the prefix cache's own entries.

    python bench/results/s58/scratch/faults_live.py [DURATION]
"""
import collections
import gc
import sys

import torch

from verispec.api import Target
from verispec.prompts import load_prompts
from verispec.serve.app import Server
from verispec.serve.faults import run_faults

duration = float(sys.argv[1]) if len(sys.argv) > 1 else 40
server = Server(Target.load(None, "bf16", "cpu"), "plain", allowed_methods=["plain"], prefill_chunk=64)
prompts = [p.prompt for p in load_prompts(["bench/dev_prompts.jsonl"])][:6]
params = {p.untyped_storage().data_ptr() for p in server.target.model.parameters()}
params |= {b.untyped_storage().data_ptr() for b in server.target.model.buffers()}


def live() -> dict:
    seen, groups = set(), collections.Counter()
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor) and not o.is_meta:
            s = o.untyped_storage()
            if s.data_ptr() in seen or s.data_ptr() in params or s.nbytes() < 1 << 20:
                continue
            seen.add(s.data_ptr())
            groups[(tuple(o.shape), str(o.dtype))] += s.nbytes()
    return groups


before = live()
r = run_faults(server, prompts, 16, duration, 64, 4000, 5)
gc.collect()
after = live()
prefix = server.scheduler.prefix
print(f"memory (less the prefix cache) after round 1 {r['rss_after_round_1_mb']:.0f} -> {r['rss_end_mb']:.0f} MiB; "
      f"prefix entries {len(prefix.entries)}, {prefix.nbytes / 2 ** 20:.0f} MiB")
print(f"live tensor storages of 1 MiB or more, not parameters: {sum(before.values()) / 2 ** 20:.0f} MiB before, "
      f"{sum(after.values()) / 2 ** 20:.0f} MiB after")
for (shape, dtype), n in after.most_common(15):
    print(f"  {n / 2 ** 20:8.1f} MiB  {dtype} {shape}")
