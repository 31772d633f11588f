"""Run a script against the checkout on PYTHONPATH, not the one the venv installed in editable mode (whose finder
comes first otherwise): python bench/results/s43/scratch/checkout_run.py SCRIPT [ARGS...]"""
import runpy
import sys

sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
