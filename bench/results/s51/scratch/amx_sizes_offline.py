"""Auto tree sizes with session 49's AMX tree costs (bench/results/s49/tree_cost_ab.txt, new build, first round)
and the shipped default profile's chain curve and c: which size would `--tree auto` choose there now that it may
choose 1-3 nodes?   python bench/results/s51/scratch/amx_sizes_offline.py"""
import json

from verispec.autok import CostProfile
from verispec.proposers.medusa import auto_tree

p = CostProfile.load("verispec/profiles/default-bf16-cpu.json")
p.tree_curve = {4: 1.04, 8: 1.12, 16: 1.55, 32: 2.02, 64: 3.25}
acc = {"eagle": json.load(open("verispec/drafts/smollm2-135m-instruct-eagle/config.json"))["acceptance"],
       "medusa": json.load(open("verispec/drafts/smollm2-135m-instruct-medusa/trees.json"))["acceptance"]}
print("chain curve", {n: round(v, 2) for n, v in p.curve.items() if n <= 5})
for m in ("eagle", "medusa"):
    for c in (p.draft_cost[m], 0.15):
        t, pred = auto_tree(acc[m], p.tree_cost, c)
        print(m, "c", round(c, 3), "chosen", t.size, {n: round(v, 2) for n, v in pred.items()})
