import sys, time, torch, json
torch.set_num_threads(2)
from verispec.api import Target, make_engine
from verispec.engine import Engine, GenerationConfig
from verispec.sampling import SamplingConfig
import verispec.engine as em
from verispec.autok import Clock
log = []
class Loud(Clock):
    def choose(self, k):
        r = super().choose(k); log.append(("choose", k, r, self.gain)); return r
    def record(self, k, s, n):
        log.append(("rec", k, round(s*1e3, 2), n)); super().record(k, s, n)
em.Clock = Loud
pid = sys.argv[1]
rows = {json.loads(l)['id']: json.loads(l) for l in open('../shared/data/prompts/long.jsonl')}
t = Target.load(None, "bf16a", "cpu")
tok = t.tokenizer
ids = tok.prompt_ids(rows[pid]['prompt'])
cfg = GenerationConfig(max_new_tokens=128, k="auto", sampling=SamplingConfig(0.0, 0, 1.0), stop_token_ids=tok.stop_token_ids)
plain = Engine(t.model); eagle = make_engine("eagle", t, tree="auto+ngram")
plain.generate(ids[:50], cfg); eagle.generate(ids[:50], cfg)
log.clear()
g1 = plain.generate(ids, cfg); g2 = eagle.generate(ids, cfg)
d1 = g1.stats.time_total_s - g1.stats.time_prefill_s; d2 = g2.stats.time_total_s - g2.stats.time_prefill_s
print(f"plain decode {d1:.2f}s ({d1/len(g1.token_ids)*1e3:.1f} ms/token), eagle {d2:.2f}s, ratio {d1/d2:.2f}, passes {g2.stats.target_passes}")
print(len(ids))
for e in log[:60]: print(e)
