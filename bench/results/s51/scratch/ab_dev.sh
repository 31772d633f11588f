#!/bin/bash
# Alternates old (/tmp/old: a worktree of the commit before the change) and new (/work/main) verispec on the
# README's development bench, one process each, run from each source folder:
#   bash bench/results/s51/scratch/ab_dev.sh OUTDIR ROUNDS DTYPE METHODS [EXTRA BENCH FLAGS]
out=$(realpath -m $1); rounds=$2; dtype=$3; methods=$4; shift 4
mkdir -p $out
for r in $(seq 1 $rounds); do
  for side in old new; do
    src=$([ $side = old ] && echo /tmp/old || echo /work/main)
    (cd $src && /work/main/.venv/bin/python -m verispec bench --prompts /work/main/bench/dev_prompts.jsonl --limit 4 \
      --max-new-tokens 64 --methods $methods --tree auto+ngram --dtype $dtype "$@" \
      --json $out/${side}_$r.json 2>/dev/null | grep -E "^(all|code|chat|general|math|qa|summar|long)" > $out/${side}_$r.txt)
    echo "== $side round $r"; grep "^all" $out/${side}_$r.txt
  done
done
