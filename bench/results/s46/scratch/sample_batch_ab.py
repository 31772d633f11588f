"""distill-data's batched sampler, the version at commit OLD (left-padded batches) against this checkout's
(ragged packed rows), on 4 long training prompts from START plus 2 short ones, 48 new tokens, temperatures
0 / 0.7 / 1 / 0 / 0 / 1: seconds each, and whether answers and top-K probabilities are equal bit for bit.

    git show 0f9c594:verispec/train/batch_generate.py > verispec/train/bg_old_tmp.py
    python bench/results/s46/scratch/sample_batch_ab.py START; rm verispec/train/bg_old_tmp.py
(START 170 and 200 of /work/data/prompts/long_code_train.jsonl, `scripts/make_long_code_prompts.py ... 400 0`)
"""
import json
import sys
import time

import torch

import verispec.train.bg_old_tmp as old
from verispec.api import Target
from verispec.train.batch_generate import sample_batch as new

torch.set_num_threads(2)
t = Target.load(None, "bf16", "cpu")
tok = t.tokenizer
start = int(sys.argv[1])
rows = [json.loads(line) for line in open("/work/data/prompts/long_code_train.jsonl")][start:start + 4]
rows += [{"prompt": "Name a colour."}, {"prompt": "What is 7 times 8?"}]
ids = [tok.prompt_ids(r["prompt"]) for r in rows]
print("prompt tokens", [len(i) for i in ids])
for name, f in (("new", new), ("old", old.sample_batch)):
    t0 = time.perf_counter()
    out = f(t.model, ids, [0.0, 0.7, 1.0, 0.0, 0.0, 1.0], 48, tok.stop_token_ids, seed=3)
    print(name, f"{time.perf_counter() - t0:.1f} s", flush=True)
    if name == "new":
        a = out
    else:
        print("answers equal:", [x.answer == y.answer for x, y in zip(a, out)],
              "probs equal:", [torch.equal(x.topk_probs, y.topk_probs) for x, y in zip(a, out)])
