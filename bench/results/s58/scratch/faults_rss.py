"""What the fault test's RSS growth is made of (session 58): `verispec loadtest --faults` with the prefix cache at
MB megabytes (the server's default 1024, or 0: off), and the bytes the prefix cache holds at the end.

    python bench/results/s58/scratch/faults_rss.py MB [DURATION] [trim]

trim: RSS read after glibc's malloc_trim(0), which hands freed heap pages back to the system.
"""
import sys

from verispec.api import Target
from verispec.prompts import load_prompts
from verispec.serve.app import Server
from verispec.serve.faults import run_faults
from verispec.serve.limits import Limits

mb, duration = float(sys.argv[1]), float(sys.argv[2]) if len(sys.argv) > 2 else 120
if "trim" in sys.argv[3:]:
    import ctypes

    from verispec.serve import faults
    untrimmed, libc = faults.rss_mb, ctypes.CDLL("libc.so.6")
    faults.rss_mb = lambda: libc.malloc_trim(0) * 0 + untrimmed()
server = Server(Target.load(None, "bf16", "cpu"), "plain", allowed_methods=["plain"], prefill_chunk=64,
                limits=Limits(prefix_cache_mb=mb))
prompts = [p.prompt for p in load_prompts(["bench/dev_prompts.jsonl"])][:6]
r = run_faults(server, prompts, 16, duration, 64, 4000, 5)
prefix = server.scheduler.prefix
held = prefix.nbytes / 2 ** 20 if prefix is not None else 0.0
print(f"prefix cache {mb:g} MB{', trimmed' if 'trim' in sys.argv[3:] else ''}: memory (less the prefix cache) after round 1 {r['rss_after_round_1_mb']:.0f} -> {r['rss_end_mb']:.0f} MiB "
      f"({100 * r['rss_growth']:+.1f}%); the prefix cache holds {held:.0f} MiB at the end; lost {r['lost']}, "
      f"changed {r['changed']}, idle {r['idle_at_end']}")
