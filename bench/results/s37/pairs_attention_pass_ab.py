import os, statistics, time, torch
from verispec.api import Target
from verispec.tree import build_tree, topk_per_depth
torch.set_num_threads(2)
model = Target.load(None, "bf16a", "cpu").model
full = topk_per_depth([2] * 8, max_nodes=1024)
res = {}
for context in (256, 2048):
    cache = model.new_cache(context + 80)
    model(torch.randint(0, 1000, (1, context)), torch.arange(context)[None], cache)
    shapes = {"1 row": (torch.randint(0, 1000, (1, 1)), torch.tensor([[context]]), None)}
    for n in (8, 16):
        tree = build_tree(list(full.choices[:n]))
        mask = torch.cat([torch.ones(n + 1, context, dtype=torch.bool), tree.ancestry], 1)[None]
        shapes[f"tree {n}"] = (torch.randint(0, 1000, (1, n + 1)), (context + torch.tensor(tree.depths))[None], mask)
    for _ in range(15):
        for name, (tok, pos, mask) in shapes.items():
            for mode in ("fp32 attention", "pairs attention"):
                if mode.startswith("fp32"): os.environ["VS_AB_NO_PAIRS"] = "1"
                else: os.environ.pop("VS_AB_NO_PAIRS", None)
                cache.truncate(context); t0 = time.perf_counter(); model.logits(model(tok, pos, cache, mask))
                res.setdefault((context, name, mode), []).append(time.perf_counter() - t0)
for (c, name, mode), v in res.items():
    print(c, name, mode, round(1e3 * statistics.median(v[2:]), 2), "ms")
