#!/bin/bash
# Alternates old (/tmp/old: a worktree of the commit before the change) and new (/work/main) verispec on the
# pair's bench, one process each, run from each source folder:
#   bash bench/results/s51/scratch/ab_pair.sh OUTDIR ROUNDS TREE [EXTRA BENCH FLAGS]
out=$(realpath -m $1); rounds=$2; tree=$3; shift 3
mkdir -p $out
for r in $(seq 1 $rounds); do
  for side in old new; do
    src=$([ $side = old ] && echo /tmp/old || echo /work/main)
    (cd $src && /work/main/.venv/bin/python -m verispec bench --model qwen2.5-coder-1.5b --dtype gguf-q8 \
      --prompts /work/main/bench/results/s15/pair_prompts.jsonl --max-new-tokens 64 --methods eagle --tree $tree \
      "$@" --json $out/${side}_$r.json 2>/dev/null | grep -E "^(all|code|completion|general|math) " > $out/${side}_$r.txt)
    echo "== $side round $r"; cat $out/${side}_$r.txt
  done
done
