#!/bin/bash
# The pair's bench (EAGLE, one tree mode), session 55's code (a worktree at $OLD, default /tmp/old: git worktree add
# /tmp/old 86188e3) and this tree's, alternated, each process run from its own source tree (run_at.py):
#   bash bench/results/s56/scratch/ab_pair.sh OUTDIR ROUNDS TREE [EXTRA BENCH FLAGS]
cd "$(dirname "$0")/../../../.."   # the repository root
out=$(realpath -m $1); rounds=$2; tree=$3; shift 3
mkdir -p $out
for r in $(seq 1 $rounds); do
  for side in old new; do
    root=$([ $side = old ] && echo ${OLD:-/tmp/old} || echo $PWD)
    .venv/bin/python bench/results/s55/scratch/run_at.py $root bench --model qwen2.5-coder-1.5b --dtype gguf-q8 \
      --prompts bench/results/s15/pair_prompts.jsonl --max-new-tokens 64 --methods eagle --tree $tree \
      "$@" --json $out/${side}_$r.json 2>/dev/null | grep -E "^(all|code|completion|general|math) " > $out/${side}_$r.txt
    echo "== $side round $r"; cat $out/${side}_$r.txt
  done
done
