#!/bin/bash
# Session 55's code (a worktree at $OLD, default /tmp/old) on the pair's bench, EAGLE dynamic+ngram, with two cached
# measurements of the 1.5B's verify costs on this machine alternated: NOISY (taken while the VM was busy) and CLEAN:
#   bash bench/results/s56/scratch/ab_verify_file.sh OUTDIR ROUNDS NOISY CLEAN CACHED
# CACHED: the cache file both are copied to in turn ($VERISPEC_HOME/profiles/verify-KEY.json, the key session 55's
# code computes for the 1.5B in gguf-q8 here).
cd "$(dirname "$0")/../../../.."   # the repository root
out=$(realpath -m $1); rounds=$2; noisy=$3; clean=$4; cached=$5
mkdir -p $out
for r in $(seq 1 $rounds); do
  for side in noisy clean; do
    cp $([ $side = noisy ] && echo $noisy || echo $clean) $cached
    .venv/bin/python bench/results/s55/scratch/run_at.py ${OLD:-/tmp/old} bench --model qwen2.5-coder-1.5b \
      --dtype gguf-q8 --prompts bench/results/s15/pair_prompts.jsonl --max-new-tokens 64 --methods eagle \
      --tree dynamic+ngram --json $out/${side}_$r.json 2>/dev/null | grep -E "^(all|code|completion|general|math) " > $out/${side}_$r.txt
    echo "== $side round $r"; cat $out/${side}_$r.txt
  done
done
cp $clean $cached
