"""A planted leak (the batch keeps every finished sequence) against the fault test's memory verdict, on the tiny
test model (session 59). Run it with verispec/serve/faults.py as at a6b20d9 (resident memory judged) or after
(live tensors judged):

    python bench/results/s59/scratch/planted_leak.py TINY_MODEL_FOLDER
"""
import sys

from verispec.api import Target
from verispec.serve.app import Server
from verispec.serve import batch as batch_module
from verispec.serve.faults import run_faults, passed
t = Target.load(sys.argv[1], "fp32", "cpu")          # the suite's tiny model (tests/conftest.py: tiny_dir)
kept = []


def verdict(r):
    try:
        return passed(r, slack_mb=0.1)               # after: the tiny model's slack in tests/test_serve_faults.py
    except TypeError:
        return passed(r)                             # a6b20d9: resident memory within 10%



drop = batch_module.Batch._drop_finished
def keeping(self):
    done = drop(self); kept.extend(done); return done
batch_module.Batch._drop_finished = keeping
for i in range(2):
    r = run_faults(Server(t, "plain", max_batch=4), ["The old lighthouse keeper", "Numbers: 3 1 4 1 5 9", "Dear diary, today"], clients=4, duration=2, max_tokens=200, long_tokens=0, fault_every=2)
    print(f"kept {len(kept)} sequences; resident growth {r['rss_growth']:+.2%}; "
          f"live growth {r.get('live_growth_mb', '-')} MiB; the test passes it: {verdict(r)}")
