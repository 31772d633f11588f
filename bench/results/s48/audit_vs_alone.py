"""Audit runs (packed, from one shared prefill: `audit.sample_sequences`) against each seed generated alone with
`Engine.generate`, at T = 1 on the repeated-sentence prompt: which runs differ (none, where the bits hold).

    python bench/results/s48/audit_vs_alone.py METHOD TREE|- N [DTYPE]
"""
import sys
from dataclasses import replace
from verispec.api import Target, make_engine
from verispec.engine import Engine, GenerationConfig
from verispec.sampling import SamplingConfig
from verispec.audit import sample_sequences
class Bar:
    def update(self, n): pass
method, tree, n = sys.argv[1], (sys.argv[2] if sys.argv[2] != "-" else None), int(sys.argv[3])
dtype = sys.argv[4] if len(sys.argv) > 4 else "bf16"
t = Target.load(None, dtype, "cpu")
ids = t.tokenizer.prompt_ids("the cat sat on the mat. " * 3 + "the cat sat on", False)
cfg = GenerationConfig(max_new_tokens=4, k=3, seed=0, sampling=SamplingConfig(1.0), stop_token_ids=t.tokenizer.stop_token_ids)
for name, eng in (("plain", Engine(t.model)), (method, make_engine(method, t, None, 3, tree))):
    b = sample_sequences(eng, ids, cfg, n, 1000, Bar(), 8)[0]
    a = [tuple(eng.generate(ids, replace(cfg, seed=1000 + i)).token_ids) for i in range(n)]
    a = [x + ("<stop>",) * (4 - len(x)) for x in a]
    print(name, dtype, "differ at", [i for i in range(n) if a[i] != b[i]])
