import time, statistics, torch, collections
from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import GenerationConfig
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig
torch.set_num_threads(2)
target = Target.load(None, "bf16a", "cpu", "auto")
engine = make_engine("eagle", target, tree="auto+ngram")
head = engine.proposer.head
T = collections.defaultdict(list)
ON = [False]
def wrap(obj, name, label):
    f = getattr(obj, name)
    def g(*a, **k):
        t0 = time.perf_counter(); r = f(*a, **k)
        if ON[0]: T[label].append(time.perf_counter() - t0)
        return r
    setattr(obj, name, g)
wrap(head.fc, "forward", "fc")
wrap(head.decoder, "forward", "decoder")
wrap(head, "logits", "head logits")
plan = []
for p in select(load_prompts(["bench/dev_prompts.jsonl"]), 2):
    cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                           stop_token_ids=target.tokenizer.stop_token_ids)
    seq = engine.sequence(target.tokenizer.prompt_ids(p.prompt), cfg)
    seq.prefill(None); ON[0] = True

    with torch.inference_mode():
        while not seq.done:
            t0 = time.perf_counter(); step = seq.plan(seq.draft_length()); plan.append(time.perf_counter() - t0)
            hidden = engine.target(*step.inputs(seq.cache))
            seq.finish(step, hidden)
    ON[0] = False
n = len(plan)
print(f"cycles {n}, plan mean {sum(plan)/n*1e3:.2f} ms")
for k, v in T.items():
    print(f"{k}: calls/cycle {len(v)/n:.2f}, median {statistics.median(v)*1e3:.3f} ms, per cycle {sum(v)/n*1e3:.3f} ms")
