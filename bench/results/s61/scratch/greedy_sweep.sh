#!/bin/bash
# Greedy output against plain decoding on all 60 development prompts, every method and tree mode, in each dtype
# given (session 61). Usage: bash greedy_sweep.sh OUTDIR DTYPE...
out=$1; shift
mkdir -p "$out"
v=/work/main/.venv/bin/verispec
for dt in "$@"; do
  $v bench --dtype $dt --prompts bench/dev_prompts.jsonl --max-new-tokens 48 --methods ngram,draft,draft-tree,medusa,eagle --json $out/chains_$dt.json > $out/chains_$dt.txt 2>&1
  $v bench --dtype $dt --prompts bench/dev_prompts.jsonl --max-new-tokens 48 --methods eagle,medusa --tree auto+ngram --json $out/auto_ngram_$dt.json > $out/auto_ngram_$dt.txt 2>&1
  $v bench --dtype $dt --prompts bench/dev_prompts.jsonl --max-new-tokens 48 --methods eagle --tree dynamic+ngram --json $out/dynamic_ngram_$dt.json > $out/dynamic_ngram_$dt.txt 2>&1
  $v bench --dtype $dt --prompts bench/dev_prompts.jsonl --max-new-tokens 48 --methods eagle,medusa,draft-tree --tree 16 --json $out/tree16_$dt.json > $out/tree16_$dt.txt 2>&1
done
for f in "$out"/*.txt; do echo "== $f"; grep '^all ' "$f"; done
