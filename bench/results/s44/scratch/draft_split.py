"""Where EAGLE auto+ngram's cycle goes (bf16, 8 dev prompts, 64 new tokens, greedy): wall time inside the head's
passes (fc, its layer), its logits, the target's passes and the target's logits, per cycle; the rest of plan and
finish is everything else (ranking, trees, accept rule, Python)."""
import time, statistics, torch
from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import GenerationConfig
from verispec.model.eagle import EagleHead
from verispec.model.llama import Llama
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig

torch.set_num_threads(2)
target = Target.load(None, "bf16", "cpu")
engine = make_engine("eagle", target, tree="auto+ngram")
acc = {}
def wrap(cls, name, key, cond=lambda self: True):
    f = getattr(cls, name)
    def g(self, *a, **k):
        if not cond(self):
            return f(self, *a, **k)
        t0 = time.perf_counter(); r = f(self, *a, **k); acc[key] = acc.get(key, 0) + time.perf_counter() - t0
        acc[key + " n"] = acc.get(key + " n", 0) + 1
        return r
    setattr(cls, name, g)
tm = target.model
wrap(EagleHead, "forward", "head pass")
wrap(EagleHead, "logits", "head logits")
wrap(Llama, "forward", "target pass", lambda self: self is tm)
wrap(Llama, "logits", "target logits", lambda self: self is tm)
from verispec import engine as E
for n in ("plan", "finish"):
    wrap(E.Sequence, n, n)
prompts = select(load_prompts(["bench/dev_prompts.jsonl"]), 2)
def run():
    for p in prompts:
        cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                               stop_token_ids=target.tokenizer.stop_token_ids)
        g = engine.generate(target.tokenizer.prompt_ids(p.prompt), cfg)
    return g
run(); acc.clear()
t0 = time.perf_counter(); run(); total = time.perf_counter() - t0
cycles = acc["plan n"]
print(f"{cycles} cycles, {total / cycles * 1e3:.2f} ms a cycle")
for k in ("plan", "head pass", "head logits", "target pass", "finish", "target logits"):
    print(f"  {k:14s} {acc.get(k, 0) / cycles * 1e3:6.2f} ms a cycle, {acc.get(k + ' n', 0) / cycles:.2f} calls")
