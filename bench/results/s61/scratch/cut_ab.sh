#!/bin/bash
# draft-tree under --k auto: session 61's code before (OLD, its tree gated whole) and after (NEW, cut to the depth
# that pays), each in its own bench run with its own plain decoding, alternated ROUNDS times. The draft chain
# runs beside it as the yardstick. Usage: bash cut_ab.sh OLD NEW OUTDIR ROUNDS [DTYPE]; BENCH_ARGS (default: the
# development prompts, 48 new tokens) replaces the prompts and lengths, e.g. for the Qwen pair; METHODS (default
# draft,draft-tree) and TREE (a --tree value, default none) the methods (session 62: TREE=16 METHODS=medusa,eagle).
old=$1 new=$2 out=$3 rounds=$4 dtype=${5:-bf16}
py=/work/main/.venv/bin/python
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    tree=$old; [ $side = new ] && tree=$new
    PYTHONPATH=$tree $py /work/main/scripts/checkout_run.py /work/main/bench/results/s61/scratch/cli.py bench \
      --dtype "$dtype" ${BENCH_ARGS:---prompts bench/dev_prompts.jsonl --max-new-tokens 48} --methods "${METHODS:-draft,draft-tree}" ${TREE:+--tree "$TREE"} \
      --json "$out/${side}_$r.json" > "$out/${side}_$r.txt" 2>&1
    echo "== $side round $r"; grep '^all ' "$out/${side}_$r.txt"
  done
done
