#!/bin/bash
# The VNNI integer product's float step, measured (session 61): this machine's vpdpbusd peak (vnni_peak.c), then
# q8linear's GMAC/s by row count as shipped, with fewer float operations (fewer_float_ops.patch: the same bits),
# and with no float step at all (no_float_step.patch: wrong results, the time of the integer sums alone), the three
# builds alternated twice. Usage: bash float_step_ab.sh MAIN FEWER NOFLOAT  (each a tree holding verispec/ and
# tests/; FEWER and NOFLOAT with VERISPEC_HOME=<tree>_home so each keeps its own kernel build)
here=$(dirname "$0")
gcc -O2 -mavx512f -mavx512vnni -mavx512bw -fopenmp "$here/vnni_peak.c" -o /tmp/vnni_peak
OMP_NUM_THREADS=1 /tmp/vnni_peak; OMP_NUM_THREADS=2 /tmp/vnni_peak
py=/work/main/.venv/bin/python
for round in 1 2; do
  echo "== round $round: as shipped"; $py "$here/vnni_gmacs.py" "$1"
  echo "== round $round: fewer float operations"; VERISPEC_HOME=$2_home $py "$here/vnni_gmacs.py" "$2"
  echo "== round $round: no float step"; VERISPEC_HOME=$3_home $py "$here/vnni_gmacs.py" "$3"
done
