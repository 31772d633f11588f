import sys, json, torch
torch.set_num_threads(2)
from verispec.api import Target, make_engine
from verispec.engine import GenerationConfig
from verispec.sampling import SamplingConfig
from verispec.prompts import load_prompts
from verispec.bench import select
import verispec.proposers.ngram as ng
log = []
real = ng.longest_match
def spy(context, k, cap=32):
    n, chain, agreed = real(context, k, cap)
    if n >= ng.SURE and agreed: log.append((len(context), chain))
    return n, chain, agreed
ng.longest_match = spy
model, dtype, tree, path, limit = sys.argv[1:6]
t = Target.load(model, dtype, "cpu"); tok = t.tokenizer
eng = make_engine("eagle", t, tree=tree)
tot = {}
for p in select(load_prompts([path]), int(limit)):
    log.clear()
    ids = tok.prompt_ids(p.prompt)
    g = eng.generate(ids, GenerationConfig(max_new_tokens=64, k="auto", sampling=SamplingConfig(0.0, 0, 1.0), stop_token_ids=tok.stop_token_ids))
    full = ids + g.token_ids
    acc = []
    for L, chain in log:
        m = 0
        for a, b in zip(chain, full[L:]):
            if a != b: break
            m += 1
        acc.append((len(chain), m))
    print(p.id, "cycles", g.stats.target_passes, "MAT %.2f" % g.stats.mean_accepted_tokens, "sure chains (len, held):", acc)
