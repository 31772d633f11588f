"""What computing p only at the nodes verification reads (`engine.NodeProbs`) saves: EAGLE `--tree auto+ngram`
decoding of the development prompts, greedy, bf16; at every tree pass, verification runs twice on the pass's hidden
states, interleaved: with every node's p computed up front (as before NodeProbs) and with NodeProbs. Both must accept
the same path; prints the median ms of each per pass, the head rows each computed, and the tree sizes.

    python scripts/tree_verify_speed.py [PROMPTS [LIMIT [TREE]]]   (bench/dev_prompts.jsonl, 4 per category,
                                                                   auto+ngram; a static TREE decodes at k = 6)
"""
import statistics
import sys
import time

import torch

from verispec.api import Target, make_proposer
from verispec.engine import Engine, GenerationConfig, NodeProbs
from verispec.errors import VerispecError
from verispec.prompts import load_prompts
from verispec.sampling import probs
from verispec.verify import verify_tree


@torch.inference_mode()
def main(path="bench/dev_prompts.jsonl", limit=4, shape="auto+ngram"):
    torch.set_num_threads(2)
    target = Target.load(None, "bf16", "cpu")
    model, sampling = target.model, GenerationConfig().sampling
    engine = Engine(model, make_proposer("eagle", target, tree=shape))
    cfg = GenerationConfig(max_new_tokens=64, k="auto" if shape.startswith("auto") else 6,
                           stop_token_ids=target.tokenizer.stop_token_ids)
    upfront, lazy, rows, sizes = [], [], [], []

    def timed_verify(p_of, proposal):
        t0 = time.perf_counter()
        p = p_of()
        out = verify_tree(p, proposal.q, proposal.tokens, proposal.tree, torch.zeros(1 + proposal.tree.size),
                          torch.zeros(()))
        return time.perf_counter() - t0, out, p

    seen = {}
    for prompt in load_prompts([path]):
        if seen.setdefault(prompt.category, 0) >= limit:
            continue
        seen[prompt.category] += 1
        seq = engine.sequence(target.tokenizer.prompt_ids(prompt.prompt), cfg)
        seq.prefill()
        while not seq.done:
            step = seq.plan(seq.draft_length())
            hidden = model(*step.inputs(seq.cache))                               # [1, 1+n, D]
            tree = step.proposal.tree
            if tree is not None:
                a = timed_verify(lambda: probs(model.logits(hidden), sampling)[0], step.proposal)
                b = timed_verify(lambda: NodeProbs(model, hidden[0], tree, sampling), step.proposal)
                assert a[1] == b[1], "NodeProbs accepted another path"
                upfront.append(a[0]), lazy.append(b[0]), rows.append(len(b[2].rows)), sizes.append(1 + tree.size)
            seq.finish(step, hidden)
    print(f"{len(sizes)} tree passes, median {statistics.median(sizes)} rows (largest {max(sizes)}); head rows "
          f"computed: every row {sum(sizes)}, NodeProbs {sum(rows)}")
    print(f"verification per pass (median): p up front {statistics.median(upfront) * 1e3:.2f} ms, NodeProbs "
          f"{statistics.median(lazy) * 1e3:.2f} ms; in all {sum(upfront):.2f} s against {sum(lazy):.2f} s")


if __name__ == "__main__":
    if len(sys.argv) > 2 and not (sys.argv[2].isdigit() and int(sys.argv[2]) > 0):
        sys.exit(f"tree_verify_speed.py: LIMIT must be a positive whole number, got {sys.argv[2]!r}")
    try:
        main(*(sys.argv[1:2]), *(int(a) for a in sys.argv[2:3]), *sys.argv[3:4])
    except VerispecError as e:
        sys.exit(f"tree_verify_speed.py: {e}")
