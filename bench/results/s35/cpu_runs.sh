# The CPU runs of session 35: before = a worktree of 21f39a0 at /tmp/exp (git worktree add /tmp/exp 21f39a0), after = this session's code; run from each tree
R=/work/main/bench/results/s35
run() {  # tag, dir, args...
  tag=$1; dir=$2; shift 2
  cd $dir && /work/main/.venv/bin/python -m verispec bench "$@" --json $R/$tag.json > $R/$tag.txt 2>&1
}
for T in 1 0; do
  for v in before after; do
    d=/work/main; [ $v = before ] && d=/tmp/exp
    run cpu_t${T}_eagle_dynamic_$v $d --prompts bench/dev_prompts.jsonl --limit 3 --max-new-tokens 64 --methods eagle --tree dynamic+ngram --temperature $T --repeats 2
    run cpu_t${T}_eagle_medusa_auto_$v $d --prompts bench/dev_prompts.jsonl --limit 3 --max-new-tokens 64 --methods eagle,medusa --tree auto+ngram --temperature $T --repeats 2
  done
done
for v in before after; do
  d=/work/main; [ $v = before ] && d=/tmp/exp
  run pair_t1_eagle_$v $d --model qwen2.5-coder-1.5b --dtype gguf-q8 --prompts /work/main/bench/results/s15/pair_prompts.jsonl --max-new-tokens 64 --methods eagle --tree dynamic+ngram --temperature 1
done
