# Old and new checkouts alternated, each in its own process: chain passes of n rows after C cached tokens
# (rows_curve.py) and a 1,500-token prefill (prefill_time.py), default model, bf16, 2 threads.
#   bash bench/results/s49/kernels_ab.sh OLD_CHECKOUT OLD_HOME ROUNDS
# OLD_HOME: a VERISPEC_HOME for the old checkout (its own kernel builds; link models/ and downloads/ into it).
OLD=$1; OLD_HOME=$2; R=${3:-3}
NEW=$(cd "$(dirname "$0")/../../.." && pwd); HERE=$NEW/bench/results/s49; PY=$NEW/.venv/bin/python
run() { (cd "$1" && VERISPEC_HOME=$2 PYTHONPATH=$1 $PY "${@:3}" 2>/dev/null | tail -1); }
for i in $(seq "$R"); do
  for args in "rows_curve.py 256 1,4,8,12,16,17,24,32" "rows_curve.py 2048 1,8,12,16" "prefill_time.py 1500 5"; do
    set -- $args
    echo "old $(run "$OLD" "$OLD_HOME" "$HERE/$1" "${@:2}")"
    echo "new $(run "$NEW" "${VERISPEC_HOME:-$HOME/.cache/verispec}" "$HERE/$1" "${@:2}")"
  done
done
