"""Where EAGLE's drafting time goes on the CPU: time each part of a cycle's plan (the head's catch-up pass, its
tree passes, its logits, ranking) over the development prompts, greedy, 64 new tokens. Medians per call in ms.

    python bench/results/s42/scratch/draft_parts.py [DTYPE] [TREE] [DRAFT_WEIGHTS]
"""
import statistics
import sys
import time

import torch

sys.path.insert(0, "scripts")
from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import GenerationConfig
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig
from verispec.model import eagle as eagle_model
from verispec.proposers import eagle_graph, base as pbase

dtype = sys.argv[1] if len(sys.argv) > 1 else "bf16"
tree = sys.argv[2] if len(sys.argv) > 2 else "auto+ngram"
dw = sys.argv[3] if len(sys.argv) > 3 else "auto"
torch.set_num_threads(2)
target = Target.load(None, dtype, "cpu", dw)
engine = make_engine("eagle", target, tree=tree)
times = {}


def timed(name, fn):
    def wrap(*a, **k):
        t = time.perf_counter()
        out = fn(*a, **k)
        times.setdefault(name, []).append(time.perf_counter() - t)
        return out
    return wrap


H = eagle_model.EagleHead
H.forward = timed("head.forward", H.forward)
H.logits = timed("head.logits", H.logits)
eagle_graph.ranked = timed("ranked", eagle_graph.ranked)
prop = engine.proposer
prop._catch_up = timed("catch_up", prop._catch_up)
prop.propose = timed("propose", prop.propose)
rows_of = []
for p in select(load_prompts(["bench/dev_prompts.jsonl"]), 4):
    cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                           stop_token_ids=target.tokenizer.stop_token_ids)
    seq = engine.sequence(target.tokenizer.prompt_ids(p.prompt), cfg)
    seq.prefill(None)
    with torch.inference_mode():
        while not seq.done:
            step = seq.plan(seq.draft_length())
            hidden = engine.target(*step.inputs(seq.cache))
            seq.finish(step, hidden)
for name, ts in times.items():
    print(f"{name:14s} calls {len(ts):5d}  median {statistics.median(ts)*1000:6.3f} ms  total {sum(ts):6.2f} s")
