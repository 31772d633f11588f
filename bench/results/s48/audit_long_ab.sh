#!/usr/bin/env bash
# verispec audit on a long prompt (the first of ../shared/data/prompts/long.jsonl), before (a checkout of a151992 at
# $1, VERISPEC_HOME $2) and after (this checkout), alternated; wall seconds, model load included.
# bash bench/results/s48/audit_long_ab.sh /tmp/old_a151 /tmp/home_old
OLD=$1; OLD_HOME=$2; NEW=$(pwd); PY=$NEW/.venv/bin/python
PROMPT=$($PY -c "import json; print(json.loads(open('$NEW/../shared/data/prompts/long.jsonl').readline())['prompt'])")
(cd $OLD && VERISPEC_HOME=$OLD_HOME $PY -c "from verispec import kernels; kernels.load()")     # builds, untimed
echo "prompt: $(cd $NEW && $PY -c "import sys; from verispec.api import Target; t = Target.load(None, 'bf16', 'cpu'); print(len(t.tokenizer.prompt_ids(sys.argv[1])), 'tokens with the chat template')" "$PROMPT")"
for round in 1 2; do for which in before after; do
  dir=$NEW; home=${VERISPEC_HOME:-$HOME/.cache/verispec}
  [ $which = before ] && dir=$OLD && home=$OLD_HOME
  out=$(cd $dir && VERISPEC_HOME=$home /usr/bin/time -o /tmp/audit_t -f %e $PY -m verispec audit --method eagle \
        --tree dynamic+ngram --samples 48 --tokens 2 --prompt "$PROMPT" 2>&1 | grep -E 'accepted|combined|error' | tr '\n' ' ')
  echo "round $round $which: eagle dynamic+ngram, 48 samples, 2 tokens: $(cat /tmp/audit_t) s | $out"
done; done
