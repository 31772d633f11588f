"""Target passes EAGLE auto+ngram takes on the given long prompts (greedy, 128 new tokens), at each lookup cutoff.

    python bench/results/s42/scratch/passes_one.py ID [ID ...]
"""
import json
import sys

import torch

from verispec.api import Target, make_engine
from verispec.engine import GenerationConfig
from verispec.proposers import ngram
from verispec.sampling import SamplingConfig

torch.set_num_threads(2)
prompts = {json.loads(l)["id"]: json.loads(l)["prompt"] for l in open("../shared/data/prompts/long.jsonl")}
target = Target.load(None, "bf16", "cpu")
engine = make_engine("eagle", target, tree="auto+ngram")
for pid in sys.argv[1:]:
    for cutoff in (0.0, 0.3):
        ngram.CUTOFF = cutoff
        cfg = GenerationConfig(max_new_tokens=128, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                               stop_token_ids=target.tokenizer.stop_token_ids)
        seq = engine.sequence(target.tokenizer.prompt_ids(prompts[pid]), cfg)
        seq.prefill(None)
        passes, rows = 0, []
        with torch.inference_mode():
            while not seq.done:
                step = seq.plan(seq.draft_length())
                rows.append(step.tokens.shape[1])
                seq.finish(step, engine.target(*step.inputs(seq.cache)))
        print(pid, "cutoff", cutoff, "passes", len(rows), "rows", sorted(set(rows)), "mean rows", sum(rows) / len(rows))
