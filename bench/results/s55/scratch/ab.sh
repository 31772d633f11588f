#!/bin/bash
# plain, ngram and EAGLE on the default model (gguf-q8), session 54's code (a worktree of e962912 at $OLD, default
# /tmp/wt54: git worktree add /tmp/wt54 e962912) and this tree's, alternated
cd "$(dirname "$0")/../../../.."   # the repository root
for round in 1 2; do
  for side in old new; do
    if [ $side = old ]; then root=${OLD:-/tmp/wt54}; else root=$PWD; fi
    echo "== round $round $side ($root)"
    .venv/bin/python bench/results/s55/scratch/run_at.py $root bench --dtype gguf-q8 --prompts bench/dev_prompts.jsonl --limit 2 \
      --max-new-tokens 64 --methods ngram,eagle --tree auto+ngram --repeats 2 --json /tmp/ab_${side}_${round}.json 2>&1 | grep -E "plain|ngram|eagle|median|overall" | tail -8
  done
done
