#!/bin/bash
# old/new A/B, processes alternated: bench/results/s43/scratch/ab.sh OLD_CHECKOUT NEW_CHECKOUT OUT_PREFIX ROUNDS ARGS...
old=$1; new=$2; out=$3; rounds=$4; shift 4
for r in $(seq 1 $rounds); do
  for side in old new; do
    [ $((r % 2)) -eq 0 ] && side=$([ $side = old ] && echo new || echo old)
    dir=$([ $side = old ] && echo $old || echo $new)
    PYTHONPATH=$dir $dir/.venv/bin/python bench/results/s43/scratch/run_one.py "$@" > ${out}_${side}_$r.jsonl
  done
done
