#!/bin/bash
# Session 63, after the development-prompt A/B: the pair with --tree 16 (old and new code), then T = 1 audits of
# the new code's cuts. Run from /work/main.
cd /work/main
BENCH_ARGS="--model qwen2.5-coder-1.5b --prompts bench/results/s15/pair_prompts.jsonl --max-new-tokens 64" DTYPE=gguf-q8 \
  bash bench/results/s63/scratch/ladder_ab.sh /tmp/old63 /tmp/new63 bench/results/s63/ladder_ab_pair 1 16 > bench/results/s63/ladder_ab_pair.txt 2>&1
py=/work/main/.venv/bin/python
run() { PYTHONPATH=/tmp/new63 $py scripts/checkout_run.py bench/results/s61/scratch/cli.py "$@"; }
run audit --method medusa --tree 16 --k auto --samples 400 --tokens 4 --temperature 1 \
  --prompt "Write the numbers 1 to 30 separated by commas: 1, 2, 3, 4, 5," > bench/results/s63/audit_medusa_tree16_auto_t1.txt 2>&1
run audit --method eagle --tree 16 --k auto --samples 400 --tokens 3 --temperature 1 \
  --prompt "Count from one to twenty in words: one, two, three," > bench/results/s63/audit_eagle_tree16_auto_t1.txt 2>&1
echo done
