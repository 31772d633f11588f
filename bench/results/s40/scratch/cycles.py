import sys, time, torch
from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import GenerationConfig
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig
torch.set_num_threads(2)
target = Target.load(None, "bf16a", "cpu", "auto")
engine = make_engine("eagle", target, tree="auto+ngram")
def plan_phase(seq):
    return seq.plan(seq.draft_length())
def pass_phase(step, seq):
    return engine.target(*step.inputs(seq.cache))
def finish_phase(seq, step, hidden):
    seq.finish(step, hidden)
for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
    for p in select(load_prompts(["bench/dev_prompts.jsonl"]), 4):
        cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                               stop_token_ids=target.tokenizer.stop_token_ids)
        seq = engine.sequence(target.tokenizer.prompt_ids(p.prompt), cfg)
        seq.prefill(None)
        with torch.inference_mode():
            while not seq.done:
                step = plan_phase(seq)
                hidden = pass_phase(step, seq)
                finish_phase(seq, step, hidden)
