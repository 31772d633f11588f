#!/bin/bash
# 10 long prompts (../shared/data/prompts/long.jsonl, --limit 5), EAGLE auto+ngram, old (/tmp/old: b3e3d7a) then
# new (/work/main), one process each:  bash bench/results/s51/scratch/ab_long.sh OUTDIR DTYPE
out=$(realpath -m $1); dtype=$2
mkdir -p $out
for side in old new; do
  src=$([ $side = old ] && echo /tmp/old || echo /work/main)
  (cd $src && /work/main/.venv/bin/python -m verispec bench --prompts /work/shared/data/prompts/long.jsonl --limit 5 \
    --max-new-tokens 128 --methods eagle --tree auto+ngram --dtype $dtype \
    --json $out/${side}.json 2>/dev/null | grep -E "^[a-z_]+ +[a-z]+ +[0-9]" > $out/${side}.txt)
  echo "== $side"; cat $out/${side}.txt
done
