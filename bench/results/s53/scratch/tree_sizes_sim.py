"""Would a dynamic EAGLE tree sized per cycle from the head's own confidence pay where rows are dear?
Runs EAGLE with a deep dynamic tree (NODES nodes, DEPTH deep, all verified: only to log them), records each cycle's
nodes with the head's path confidence and which nodes the target accepted, then replays every cycle offline:
verifying only the top-n nodes by confidence (a subtree: parents score at least their children) keeps the accepted
path's prefix inside it. Policies compared on tokens per plain step, sum(1 + accepted) / sum(T(1 + n) + c):
fixed n, and n chosen per cycle as argmax (1 + b sum p) / T(1 + n) (b: confidence calibration, fitted online).
    python bench/results/s53/scratch/tree_sizes_sim.py IDS [NODES] [DEPTH] [EXPAND]"""
import json
import math
import sys

import torch

from verispec import engine as E
from verispec.api import Speculator, Target
from verispec.proposers import eagle as EP

ids = sys.argv[1].split(",")
NODES, DEPTH, EXPAND = (int(a) for a in (sys.argv[2:5] + ["16", "6", "4"][len(sys.argv) - 2:]))
prompts = {json.loads(l)["id"]: json.loads(l) for l in open("bench/results/s15/pair_prompts.jsonl")}
target = Target.load("qwen2.5-coder-1.5b", "gguf-q8")
profile = target.profile()
spec = Speculator(method="eagle", target=target, tree=f"dynamic:{NODES}")
prop = spec.engine.proposer
prop.depth, prop.expand = DEPTH, EXPAND
last = {}


# dynamic_draft as the proposer runs it, keeping its float64 confidences for the log
def dynamic_draft_scored(head, expand, depth, root, head_pass):
    E_, device = expand, root.device
    top = head.logits(root)[None].float().log_softmax(-1).topk(E_)
    score, token = [top.values[0].double()], [top.indices[0]]
    parent = [torch.full((E_,), -1, device=device)]
    seen = torch.zeros(E_, E_ * (depth - 1), dtype=torch.bool, device=device)
    feat, base = root.expand(E_, -1), 0
    for d in range(1, depth):
        pick = torch.sort(-score[-1], stable=True).indices[:E_]
        seen = seen[pick]
        seen[:, (d - 1) * E_:d * E_] |= torch.eye(E_, dtype=torch.bool, device=device)
        pred = head_pass(feat[pick], head.head_ids[token[-1][pick]], d, (d - 1) * E_, seen[:, :d * E_])
        top = head.logits(pred).float().log_softmax(-1).topk(E_)
        score.append((score[-1][pick][:, None] + top.values.double()).flatten())
        token.append(top.indices.flatten())
        parent.append(base + pick.repeat_interleave(E_))
        base += len(score[-2])
        seen, feat = seen.repeat_interleave(E_, 0), pred.repeat_interleave(E_, 0)
    score = torch.cat(score)
    last["score"] = score.tolist()
    return torch.stack([torch.sort(-score, stable=True).indices, torch.cat(parent), torch.cat(token)])


EP.dynamic_draft = dynamic_draft_scored
orig_most = EP._most_confident


def most_confident(order, parent, path, tokens, nodes):
    prop_ = orig_most(order, parent, path, tokens, nodes)
    by_path = {path[i]: i for i in order}
    last["tree_scores"] = [math.exp(last["score"][by_path[c]]) for c in prop_.tree.choices]
    return prop_


EP._most_confident = most_confident
cycles = []
orig_vt = E.Sequence._verify_tree


def verify_tree(self, step, hidden, logits):
    accepted, nxt = orig_vt(self, step, hidden, logits)
    tree = step.proposal.tree
    if "tree_scores" in last and len(last["tree_scores"]) == tree.size:
        # the accepted path's node indices (1-based, breadth-first): follow tokens from the root
        path, node = [], 0
        for tok in accepted:
            node = next(c for c in range(1, tree.size + 1) if tree.parents[c] == node
                        and step.proposal.tokens[c - 1] == tok)
            path.append(node)
        cycles.append({"p": last["tree_scores"], "parents": list(tree.parents), "path": path, "cat": cur[0]})
    last.pop("tree_scores", None)
    return accepted, nxt


E.Sequence._verify_tree = verify_tree
cur = [None]
for pid in ids:
    cur[0] = prompts[pid]["category"]
    r = spec.generate(prompts[pid]["prompt"], max_new_tokens=64, k=DEPTH)
    print(pid, "MAT", round(r.stats["mean_accepted_tokens"], 2), file=sys.stderr)
json.dump(cycles, open("bench/results/s53/tree_cycles.json", "w"))
