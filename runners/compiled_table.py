"""`python -m runners.compiled_table`: The compiled-resources table of one commit: every stock design's kernels
compiled for every architecture.

The command's code and its documentation: runners/compile/table.py.
"""
import sys

from runners.compile.table import main  # noqa: F401 - the command's entry point

if __name__ == "__main__":
    sys.exit(main())
