"""One side of an old/new A/B: plain decoding and one speculative method over a prompt file, greedy, from the
verispec checkout this is run in (PYTHONPATH); prints one JSON line per prompt: id, method, times, tokens.

    PYTHONPATH=CHECKOUT python bench/results/s43/scratch/run_one.py PROMPTS LIMIT METHOD TREE [MODEL DTYPE DRAFT]
"""
import json
import sys

sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]   # PYTHONPATH's checkout, not the venv's
import torch  # noqa: E402

from verispec.api import Target, make_engine  # noqa: E402
from verispec.bench import select  # noqa: E402
from verispec.engine import Engine, GenerationConfig  # noqa: E402
from verispec.prompts import load_prompts  # noqa: E402
from verispec.sampling import SamplingConfig  # noqa: E402

prompts, limit, method, tree = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
model, dtype, draft = (sys.argv[5:8] + [None, "bf16", None][len(sys.argv[5:8]):])
model = None if model in (None, "default") else model
torch.set_num_threads(2)
target = Target.load(model, dtype, "cpu")
engines = {"plain": Engine(target.model),
           method: make_engine(method, target, tree=None if tree == "none" else tree,
                               **({"draft": draft} if draft else {}))}
tok = target.tokenizer
for p in select(load_prompts([prompts]), limit):
    ids = tok.prompt_ids(p.prompt)
    for name, e in engines.items():
        cfg = GenerationConfig(max_new_tokens=128, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                               stop_token_ids=tok.stop_token_ids)
        g = e.generate(ids, cfg)
        print(json.dumps({"id": p.id, "category": p.category, "method": name, "total": g.stats.time_total_s,
                          "prefill": g.stats.time_prefill_s, "tokens": g.token_ids}), flush=True)
