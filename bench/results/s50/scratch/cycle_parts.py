"""One generation loop timed by part (drafting, the target pass, accepting with the logits), plain decoding and
EAGLE with a static tree, over the first N development prompts, 64 new tokens; medians per cycle. 2 threads.

    python bench/results/s50/scratch/cycle_parts.py DTYPE TREE N      (e.g. gguf-q8 4 8)
"""
import sys, time, json, torch, statistics
from verispec.api import Target, make_engine
from verispec.engine import GenerationConfig
torch.set_num_threads(2)
dtype, tree, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = Target.load(None, dtype, "cpu")
prompts = [json.loads(l) for l in open("bench/dev_prompts.jsonl")][:n]
engs = {"plain": make_engine("plain", t), "eagle": make_engine("eagle", t, tree=tree)}
for name, e in engs.items():
    parts = {"plan": [], "pass": [], "finish": []}
    rows = []
    for p in prompts:
        ids = t.tokenizer.encode(p["prompt"])
        seq = e.sequence(ids, GenerationConfig(max_new_tokens=64, k=3 if name == "eagle" else 4))
        seq.prefill(None, [])
        while not seq.done:
            t0 = time.perf_counter(); step = seq.plan(seq.draft_length()); t1 = time.perf_counter()
            hidden = e.target(*step.inputs(seq.cache)); t2 = time.perf_counter()
            seq.finish(step, hidden); t3 = time.perf_counter()
            parts["plan"].append(t1 - t0); parts["pass"].append(t2 - t1); parts["finish"].append(t3 - t2); rows.append(step.tokens.shape[1])
    print(name, "rows/pass %.2f" % (sum(rows) / len(rows)), " ".join(f"{k} {statistics.median(v)*1e3:.2f} ms" for k, v in parts.items()))
