"""Session 43's starting point, timed line by line: ad666c2's target pass (Llama.forward, reproduced step by step with
a timer between steps) inside EAGLE auto+ngram decoding of the 16 development prompts (bf16, 64 new tokens); medians
in us for 1-row passes and tree passes. Run it against that checkout:

    PYTHONPATH=OLD_CHECKOUT python bench/results/s43/scratch/pass_lines_old.py
"""
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]   # PYTHONPATH's checkout, not the venv's
import time, statistics, collections, torch, sys
from verispec.model import llama, ops, fused, graphs
from verispec.model.llama import Block
P = time.perf_counter
acc = collections.defaultdict(list)
orig = llama.Llama.forward
def fwd(self, tokens, positions, cache, mask=None, embeds=None):
    if len(self.layers) == 1 or cache is None: return orig(self, tokens, positions, cache, mask, embeds)
    T = [P()]
    b, t = positions.shape
    g = graphs.enabled(self.device); T.append(P())
    x = self.embed(tokens); T.append(P())
    masks = [None] * b if mask is None else list(mask.reshape(-1, t, mask.shape[-1]).expand(b, -1, -1))
    rows = ops.Rows.plan([(cache, i, t, m) for i, m in enumerate(masks)]); T.append(P())
    rows.kernels = True
    if ops.invariant(x): x = x.float()
    T.append(P())
    rope = self.rope(positions); T.append(P())
    blocks = self.layers
    hk = fused._hooked(blocks); T.append(P())
    ty = any(type(b) is not Block or "forward" in b.__dict__ for b in blocks); T.append(P())
    s = blocks.__dict__.get("_stack")
    if s is None: return orig(self, tokens, positions, cache, mask, embeds)
    v = s.valid(blocks); T.append(P())
    flat, cos, sin = fused._flat(x, rope); segments = rows.segments
    ks = [c.k for c, *_ in segments]; vs = [c.v for c, *_ in segments]; bs = [b for _, b, *_ in segments]; T.append(P())
    st = rows.stores(any(b.attn.wqkv.act_bf16 for b in blocks)) if s.floats else (); T.append(P())
    y = s.kernel.run(flat, cos, sin, ks, vs, bs, rows.seq, rows.slot, rows.ctx, rows.extra, rows.n_extra, ops.CHUNK, *st); T.append(P())
    h = self.norm(y.view(x.shape)); T.append(P())
    cache.advance(t); T.append(P())
    for i in range(len(T) - 1): acc[(t > 1, i)].append(T[i + 1] - T[i])
    return h
llama.Llama.forward = fwd

from verispec.api import Target, make_engine
from verispec.bench import select
from verispec.engine import GenerationConfig
from verispec.prompts import load_prompts
from verispec.sampling import SamplingConfig
torch.set_num_threads(2)
target = Target.load("smollm2-135m", "bf16", "cpu", "auto")
engine = make_engine("eagle", target, tree="auto+ngram")
for rep in range(1):
  for p in select(load_prompts(["bench/dev_prompts.jsonl"]), 4):
    cfg = GenerationConfig(max_new_tokens=64, k="auto", seed=0, sampling=SamplingConfig(0.0, 0, 1.0),
                           stop_token_ids=target.tokenizer.stop_token_ids)
    seq = engine.sequence(target.tokenizer.prompt_ids(p.prompt), cfg)
    seq.prefill(None)
    with torch.inference_mode():
        while not seq.done:
            step = seq.plan(seq.draft_length())
            hidden = engine.target(*step.inputs(seq.cache))
            seq.finish(step, hidden)
names = "graphs embed plan float rope hooked types valid flat stores KERNEL norm adv".split()
for tree in (False, True):
    print("tree" if tree else "1-row", {n: round(statistics.median(acc[(tree, i)]) * 1e6, 1) for i, n in enumerate(names)})
