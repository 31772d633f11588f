"""cProfile of EAGLE (auto+ngram) generation on a few prompts: where a cycle's drafting time goes.

    python bench/results/s47/scratch/draft_profile.py PROMPTS.jsonl N [TREE]
"""
import cProfile, json, pstats, sys, torch
from verispec.api import Speculator
torch.set_num_threads(2)
prompts = [json.loads(l)["prompt"] for l in open(sys.argv[1])][:int(sys.argv[2])]
s = Speculator(method="eagle", tree=sys.argv[3] if len(sys.argv) > 3 else "auto+ngram")
s.generate(prompts[0], 16)
pr = cProfile.Profile(); pr.enable()
for p in prompts:
    r = s.generate(p, 64)
    print(r.stats["target_passes"], r.stats["mean_accepted_tokens"], r.stats["time_draft_s"], r.stats["time_verify_s"])
pr.disable()
st = pstats.Stats(pr); st.sort_stats("cumtime").print_callees("static_draft|eagle.py:79|_catch_up|propose")
