#!/bin/bash
# Session 63: greedy output against plain in fp32 for the trees this session's change cuts (EAGLE and Medusa with
# --tree 16 and --tree auto), all 60 development prompts, 48 new tokens. Usage: bash fp32_cuts.sh OUTDIR
out=$1; mkdir -p "$out"
v=/work/main/.venv/bin/verispec
for tree in 16 auto; do
  $v bench --dtype fp32 --prompts bench/dev_prompts.jsonl --max-new-tokens 48 --methods eagle,medusa --tree $tree \
    --json $out/tree${tree}_fp32.json > $out/tree${tree}_fp32.txt 2>&1
done
for f in "$out"/*.txt; do echo "== $f"; grep '^all ' "$f"; done
