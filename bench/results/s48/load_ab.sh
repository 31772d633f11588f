#!/usr/bin/env bash
# Loading the Qwen pair (the 1.5B target in --dtype gguf, then its named 0.5B draft), before (a checkout of a151992
# at $1, VERISPEC_HOME $2) and after (this checkout), alternated; seconds.
# bash bench/results/s48/load_ab.sh /tmp/old_a151 /tmp/home_old
OLD=$1; OLD_HOME=$2; NEW=$(pwd); PY=$NEW/.venv/bin/python
CODE='import time
from verispec.api import Target, load_draft
t0 = time.perf_counter(); target = Target.load("qwen2.5-coder-1.5b", "gguf", "cpu"); t1 = time.perf_counter()
load_draft(target); t2 = time.perf_counter()
print(f"target {t1 - t0:.1f} s, draft {t2 - t1:.1f} s")'
for round in 1 2; do for which in before after; do
  if [ $which = before ]; then out=$(cd $OLD && VERISPEC_HOME=$OLD_HOME $PY -c "$CODE" 2>/dev/null)
  else out=$(cd $NEW && $PY -c "$CODE" 2>/dev/null); fi
  echo "round $round $which: $out"
done; done
