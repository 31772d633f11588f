"""The `verispec` command's entry point. Importing the command line imports torch, which takes seconds: a Ctrl-C
then gets the same one line as a Ctrl-C later, not a traceback from inside torch's import."""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    try:
        from .cli import main as run
    except KeyboardInterrupt:
        print("verispec: interrupted", file=sys.stderr)
        return 130
    return run(argv)
