"""`verispec ARGS...` from the checkout on PYTHONPATH (through scripts/checkout_run.py, which drops the editable
install's finder): PYTHONPATH=CHECKOUT python scripts/checkout_run.py bench/results/s61/scratch/cli.py ARGS..."""
import sys

from verispec.launch import main

sys.exit(main(sys.argv[1:]))
