"""`python -m runners.arch_defaults`: Default blocks for an architecture without measured rows, chosen by compilation
on a CPU.

The command's code and its documentation: runners/compile/arch_defaults.py.
"""
import sys

from runners.compile.arch_defaults import main  # noqa: F401 - the command's entry point

if __name__ == "__main__":
    sys.exit(main())
