#!/bin/bash
# Greedy output against plain decoding on all 60 development prompts, every method and tree mode (session 61's
# sweep plus EAGLE's --tree auto and --tree dynamic without the n-gram path, and Medusa's --tree auto).
# Usage: bash greedy_sweep.sh OUTDIR DTYPE...
out=$1; shift
mkdir -p "$out"
v=/work/main/.venv/bin/verispec
b="$v bench --prompts bench/dev_prompts.jsonl --max-new-tokens 48"
for dt in "$@"; do
  $b --dtype $dt --methods ngram,draft,draft-tree,medusa,eagle --json $out/chains_$dt.json > $out/chains_$dt.txt 2>&1
  $b --dtype $dt --methods eagle,medusa --tree auto --json $out/auto_$dt.json > $out/auto_$dt.txt 2>&1
  $b --dtype $dt --methods eagle,medusa --tree auto+ngram --json $out/auto_ngram_$dt.json > $out/auto_ngram_$dt.txt 2>&1
  $b --dtype $dt --methods eagle --tree dynamic --json $out/dynamic_$dt.json > $out/dynamic_$dt.txt 2>&1
  $b --dtype $dt --methods eagle --tree dynamic+ngram --json $out/dynamic_ngram_$dt.json > $out/dynamic_ngram_$dt.txt 2>&1
  $b --dtype $dt --methods eagle,medusa,draft-tree --tree 16 --json $out/tree16_$dt.json > $out/tree16_$dt.txt 2>&1
done
for f in "$out"/*.txt; do echo "== $f"; grep '^all \|identical' "$f"; done
