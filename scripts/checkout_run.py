"""Run a script against the verispec checkout on PYTHONPATH. The venv's editable install (`make`'s `pip install -e`)
puts a finder ahead of PYTHONPATH, so `PYTHONPATH=/other/checkout python scripts/X.py` alone still imports this
checkout's verispec; this drops that finder first. To compare two versions side by side:

    PYTHONPATH=/path/to/other/checkout python scripts/checkout_run.py scripts/tree_cost.py [ARGS...]
"""
import os
import runpy
import sys

if len(sys.argv) < 2 or not os.environ.get("PYTHONPATH"):
    sys.exit("usage: PYTHONPATH=CHECKOUT python scripts/checkout_run.py SCRIPT [ARGS...]")
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
