"""Run the verispec command from the source tree ROOT (argv[1]), bypassing the editable install's finder."""
import sys
root = sys.argv.pop(1)
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
sys.path.insert(0, root)
import verispec
assert verispec.__file__.startswith(root), verispec.__file__
from verispec.cli import main
sys.exit(main(sys.argv[1:]))
