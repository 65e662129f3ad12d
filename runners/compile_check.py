"""`python -m runners.compile_check`: Compiled resources (registers, spills, shared memory, programs per SM) of a
variant's Triton kernels for NVIDIA GPU architectures, on a machine without a GPU.

The command's code: runners/compile/command.py; its documentation: runners/compile/resources.py.
"""
import sys

from runners.compile.command import main  # noqa: F401 - the command's entry point

if __name__ == "__main__":
    sys.exit(main())
