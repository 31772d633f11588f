#!/bin/bash
# Session 63: heads' static trees under --k auto cut by depth (OLD) or to their likeliest nodes (NEW), each in its
# own bench run with its own plain decoding, alternated. Usage: bash ladder_ab.sh OLD NEW OUTDIR ROUNDS TREE...
# (e.g. 16 32 auto); METHODS (default medusa,eagle); DTYPE (default bf16); BENCH_ARGS as in s61's cut_ab.sh.
old=$1 new=$2 out=$3 rounds=$4; shift 4
py=/work/main/.venv/bin/python
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for tree in "$@"; do
    for side in old new; do
      src=$old; [ $side = new ] && src=$new
      f="$out/${side}_tree${tree}_$r"
      PYTHONPATH=$src $py /work/main/scripts/checkout_run.py /work/main/bench/results/s61/scratch/cli.py bench \
        --dtype "${DTYPE:-bf16}" ${BENCH_ARGS:---prompts bench/dev_prompts.jsonl --max-new-tokens 48} \
        --methods "${METHODS:-medusa,eagle}" --tree "$tree" --json "$f.json" > "$f.txt" 2>&1
      echo "== $side tree $tree round $r"; grep '^all ' "$f.txt"
    done
  done
done
