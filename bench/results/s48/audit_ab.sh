#!/usr/bin/env bash
# verispec audit before (a checkout of a151992 at $1) and after (this checkout), alternated, wall seconds.
# bash bench/results/s48/audit_ab.sh /tmp/old_a151 /tmp/home_old    (the second: a VERISPEC_HOME for the old
# checkout, its models linked from ~/.cache/verispec, so each checkout keeps its own kernel build)
OLD=$1; OLD_HOME=$2; NEW=$(pwd); PY=$NEW/.venv/bin/python
(cd $OLD && VERISPEC_HOME=$OLD_HOME $PY -c "from verispec import kernels; kernels.load()")     # builds, untimed
$PY -c "from verispec import kernels; kernels.load()"
EAGLE=(--method eagle --tree dynamic+ngram --k 3 --no-chat --prompt "the cat sat on the mat. the cat sat on the mat. the cat sat on the mat. the cat sat on" --samples 200 --tokens 3 --temperature 1)
for round in 1 2; do for which in before after; do
  dir=$NEW; [ $which = before ] && dir=$OLD
  for args in "--method draft" "EAGLE"; do
    if [ "$args" = EAGLE ]; then set -- "${EAGLE[@]}"; label="eagle dynamic+ngram, k 3, 200 samples, 3 tokens, cat prompt"
    else set -- --method draft; label="draft, defaults (400 samples, 4 tokens)"; fi
    home=${VERISPEC_HOME:-$HOME/.cache/verispec}; [ $which = before ] && home=$OLD_HOME
    out=$(cd $dir && VERISPEC_HOME=$home /usr/bin/time -o /tmp/audit_t -f %e $PY -m verispec audit "$@" 2>/dev/null | grep -E 'accepted|combined' | tr '\n' ' ')
    echo "round $round $which: $label: $(cat /tmp/audit_t) s | $out"
  done
done; done
