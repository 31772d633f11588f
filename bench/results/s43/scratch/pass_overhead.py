"""How long a target pass spends around its one kernel call: EAGLE auto+ngram over the 16 development prompts (bf16,
64 new tokens, greedy), every target pass (the model's 30-layer `Llama.forward`) timed whole and its `Stack.run`
alone; prints the medians and the median difference. Runs the checkout on PYTHONPATH (old or new alike).

    PYTHONPATH=CHECKOUT python bench/results/s43/scratch/pass_overhead.py
"""
import statistics
import sys
import time

sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]   # PYTHONPATH's checkout, not the venv's
import torch  # noqa: E402

from verispec.api import Target, make_engine  # noqa: E402
from verispec.bench import select  # noqa: E402
from verispec.engine import GenerationConfig  # noqa: E402
from verispec.model import fused, llama  # noqa: E402
from verispec.prompts import load_prompts  # noqa: E402
from verispec.sampling import SamplingConfig  # noqa: E402

P = time.perf_counter
whole, kernel = [], []
forward, stack = llama.Llama.forward, fused.stack


def timed_forward(self, *args, **kwargs):
    t0 = P()
    y = forward(self, *args, **kwargs)
    if len(self.layers) > 1 and args[0] is not None and args[0].shape[1] <= 16:
        whole.append(P() - t0)
    return y


class Timed:
    def __init__(self, inner):
        self.inner = inner

    def run(self, *args):
        t0 = P()
        y = self.inner.run(*args)
        if args[0].shape[0] <= 16:
            kernel.append(P() - t0)
        return y


def timed_stack(blocks, *args):
    s = blocks.__dict__.get("_stack")
    if len(blocks) > 1 and s is not None and not isinstance(s.kernel, Timed):
        s.kernel = Timed(s.kernel)
    return stack(blocks, *args)


llama.Llama.forward, fused.stack = timed_forward, timed_stack
torch.set_num_threads(2)
target = Target.load(None, "bf16", "cpu")
engine = make_engine("eagle", target, tree="auto+ngram")
for p in select(load_prompts(["bench/dev_prompts.jsonl"]), 4):
    cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                           stop_token_ids=target.tokenizer.stop_token_ids)
    engine.generate(target.tokenizer.prompt_ids(p.prompt), cfg)
n = min(len(whole), len(kernel))
print(f"{n} target passes of up to 16 rows: whole forward {statistics.median(whole) * 1e3:.2f} ms, its kernel call "
      f"{statistics.median(kernel) * 1e3:.2f} ms, around it (median difference) "
      f"{statistics.median(a - b for a, b in zip(whole[-n:], kernel[-n:])) * 1e6:.0f} us")
