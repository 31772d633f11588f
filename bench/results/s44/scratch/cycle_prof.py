"""cProfile of EAGLE auto+ngram cycles (bf16, dev prompts): where plan and finish spend, by function."""
import cProfile, pstats, sys, torch
from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import GenerationConfig
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig

torch.set_num_threads(2)
target = Target.load("smollm2-135m", "bf16", "cpu", "auto")
engine = make_engine("eagle", target, tree="auto+ngram")
prompts = select(load_prompts(["bench/dev_prompts.jsonl"]), 2)
def run():
    for p in prompts:
        cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                               stop_token_ids=target.tokenizer.stop_token_ids)
        engine.generate(target.tokenizer.prompt_ids(p.prompt), cfg)
run()
pr = cProfile.Profile(); pr.enable(); run(); pr.disable()
st = pstats.Stats(pr); st.sort_stats(sys.argv[1] if len(sys.argv) > 1 else "tottime").print_stats(45)
