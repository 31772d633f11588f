"""cProfile of EAGLE auto+ngram's plan and finish (bf16, 4 dev prompts): own time by function, heads' and target's
passes included as single entries."""
import cProfile, pstats, sys, torch
from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import GenerationConfig
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig
torch.set_num_threads(2)
target = Target.load(None, "bf16", "cpu")
engine = make_engine("eagle", target, tree="auto+ngram")
prompts = select(load_prompts(["bench/dev_prompts.jsonl"]), 1)
def run():
    for p in prompts:
        cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                               stop_token_ids=target.tokenizer.stop_token_ids)
        engine.generate(target.tokenizer.prompt_ids(p.prompt), cfg)
run()
pr = cProfile.Profile(); pr.enable(); run(); pr.disable()
st = pstats.Stats(pr)
st.sort_stats("tottime").print_stats(40)
