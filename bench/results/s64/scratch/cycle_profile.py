"""Where an EAGLE cycle's time goes outside the target's and the head's kernels: cProfile over N development
prompts (after one warm-up), greedy, k auto. Usage: python cycle_profile.py [TREE] [N] [TOKENS] [METHOD]"""
import cProfile
import json
import pstats
import sys
import time

from verispec.api import Speculator

tree = sys.argv[1] if len(sys.argv) > 1 else "auto+ngram"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 12
tokens = int(sys.argv[3]) if len(sys.argv) > 3 else 48
method = sys.argv[4] if len(sys.argv) > 4 else "eagle"
prompts = [json.loads(line)["prompt"] for line in open("bench/dev_prompts.jsonl")][:n]
spec = Speculator(method=method, tree=None if method == "plain" else tree)
spec.generate(prompts[0], max_new_tokens=tokens)
prof, t0, stats = cProfile.Profile(), time.perf_counter(), []
prof.enable()
for p in prompts:
    stats.append(spec.generate(p, max_new_tokens=tokens).stats)
prof.disable()
wall = time.perf_counter() - t0
cycles = sum(s.get("target_passes", 0) for s in stats)
print(f"{method} {tree}: {wall:.2f} s, {sum(s['new_tokens'] for s in stats)} tokens, {cycles} passes, "
      f"{1000 * wall / max(cycles, 1):.2f} ms a pass")
pstats.Stats(prof).sort_stats("tottime").print_stats(28)
