#!/bin/bash
# Session 64: heads' static trees of several sizes under --k auto (each cut per cycle by session 63's ladder), each
# in its own bench run with its own plain decoding. Usage: bash tree_sizes.sh OUTDIR ROUNDS TREE... ;
# METHODS (default medusa,eagle); DTYPE (default bf16); BENCH_ARGS (default: the 60 development prompts, 48 tokens).
out=$1 rounds=$2; shift 2
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for tree in "$@"; do
    f="$out/tree${tree}_$r"
    .venv/bin/verispec bench --dtype "${DTYPE:-bf16}" ${BENCH_ARGS:---prompts bench/dev_prompts.jsonl --max-new-tokens 48} \
      --methods "${METHODS:-medusa,eagle}" --tree "$tree" --json "$f.json" > "$f.txt" 2>&1
    echo "== tree $tree round $r"; grep '^all ' "$f.txt"
  done
done
