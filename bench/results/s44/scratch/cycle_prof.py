"""cProfile of EAGLE auto+ngram's generation (bf16, development prompts, 64 new tokens, greedy), after one warm-up
run: the top 45 functions by SORT (tottime, the default, or cumulative), over LIMIT prompts per category (2).

    python bench/results/s44/scratch/cycle_prof.py [SORT [LIMIT]]
"""
import cProfile, pstats, sys, torch
from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import GenerationConfig
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig

torch.set_num_threads(2)
target = Target.load(None, "bf16", "cpu")
engine = make_engine("eagle", target, tree="auto+ngram")
prompts = select(load_prompts(["bench/dev_prompts.jsonl"]), int(sys.argv[2]) if len(sys.argv) > 2 else 2)
def run():
    for p in prompts:
        cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                               stop_token_ids=target.tokenizer.stop_token_ids)
        engine.generate(target.tokenizer.prompt_ids(p.prompt), cfg)
run()
pr = cProfile.Profile(); pr.enable(); run(); pr.disable()
pstats.Stats(pr).sort_stats(sys.argv[1] if len(sys.argv) > 1 else "tottime").print_stats(45)
