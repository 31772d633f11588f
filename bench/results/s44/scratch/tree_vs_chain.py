"""Pass time (no logits) of a 9-row chain against an 8-node tree (+root) after N cached tokens, bf16, alternated.
usage: tree_vs_chain.py N [NODES]"""
import sys, time, statistics, torch
from verispec.api import Target
from verispec.tree import build_tree, topk_per_depth
from verispec.engine import tree_rows
torch.set_num_threads(2)
n = int(sys.argv[1]); nodes = int(sys.argv[2]) if len(sys.argv) > 2 else 8
m = Target.load(None, "bf16", "cpu").model
cache = m.new_cache(n + 80)
with torch.inference_mode():
    m(torch.randint(0, 1000, (1, n)), torch.arange(n)[None], cache)
    tree = build_tree(list(topk_per_depth([2] * 8, max_nodes=1024).choices[:nodes]))
    toks = torch.randint(0, 1000, (1, nodes + 1))
    tpos = (n + torch.tensor(tree.depths))[None]
    plan = tree_rows(tree)
    cpos = torch.arange(n, n + nodes + 1)[None]
    one = torch.arange(n, n + 1)[None]
    res = {"1 row": [], "chain": [], "tree": []}
    for i in range(40):
        for name, args in (("1 row", (toks[:, :1], one, cache)), ("chain", (toks, cpos, cache)),
                           ("tree", (toks, tpos, cache, plan))):
            cache.truncate(n)
            t0 = time.perf_counter(); m(*args); res[name].append(time.perf_counter() - t0)
print(f"N={n} {nodes} nodes:", {k: round(statistics.median(v[2:]) * 1e3, 2) for k, v in res.items()})
