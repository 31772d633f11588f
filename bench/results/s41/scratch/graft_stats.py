import sys, json, torch
torch.set_num_threads(2)
from verispec.api import Target, make_engine
from verispec.engine import GenerationConfig
from verispec.sampling import SamplingConfig
import verispec.proposers.ngram as ng
import verispec.proposers.eagle as eg
log = []
orig = ng.with_lookup_path
def spy(proposal, context, k, longest):
    chain = ng.lookup(context, min(k, longest), min_ngram=2) if longest else []
    # the matched n-gram length
    n, _, _ = ng.longest_match(context, k)
    log.append((len(context), chain, n, proposal.size))
    return orig(proposal, context, k, longest)
eg.with_lookup_path = spy
ng.with_lookup_path = spy
orig_first = ng.lookup_first
rows = {json.loads(l)['id']: json.loads(l) for l in open('../shared/data/prompts/long.jsonl')}
t = Target.load(None, "bf16a", "cpu"); tok = t.tokenizer
eagle = make_engine("eagle", t, tree="auto+ngram")
for pid in sys.argv[1:]:
    log.clear()
    ids = tok.prompt_ids(rows[pid]['prompt'])
    cfg = GenerationConfig(max_new_tokens=128, k="auto", sampling=SamplingConfig(0.0, 0, 1.0), stop_token_ids=tok.stop_token_ids)
    g = eagle.generate(ids, cfg)
    full = ids + g.token_ids
    got = {}
    for L, chain, n, size in log:
        if not chain: got.setdefault('none', 0); got['none'] += 1; continue
        m = 0
        for a, b in zip(chain, full[L:]):
            if a != b: break
            m += 1
        got.setdefault(n, []).append((len(chain), m))
    print(pid, "ctx", len(ids), "MAT", round(g.stats.mean_accepted_tokens, 2), "cycles", g.stats.target_passes)
    for n, v in sorted(got.items(), key=lambda x: str(x[0])):
        if n == 'none': print("  no graft:", v); continue
        print(f"  match n={n}: grafts {len(v)}, mean len {sum(a for a,_ in v)/len(v):.1f}, mean accepted {sum(b for _,b in v)/len(v):.2f}, zero-accepted {sum(b==0 for _,b in v)}")
