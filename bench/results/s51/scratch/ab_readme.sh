#!/bin/bash
# The README's development bench (all four methods, --repeats 3), old (/tmp/old: b3e3d7a) then new (/work/main),
# one process each:  bash bench/results/s51/scratch/ab_readme.sh OUTDIR ROUNDS DTYPE
out=$(realpath -m $1); rounds=$2; dtype=$3
mkdir -p $out
for r in $(seq 1 $rounds); do
  for side in old new; do
    src=$([ $side = old ] && echo /tmp/old || echo /work/main)
    (cd $src && /work/main/.venv/bin/python -m verispec bench --prompts /work/main/bench/dev_prompts.jsonl --limit 4 \
      --max-new-tokens 64 --methods eagle,medusa,draft,ngram --tree auto+ngram --repeats 3 --dtype $dtype \
      --json $out/${side}_$r.json 2>/dev/null | grep -E "^[a-z]+ +[a-z]+ +[0-9]" > $out/${side}_$r.txt)
    echo "== $side round $r"; grep "^all" $out/${side}_$r.txt
  done
done
