"""`python -m runners.regress`: Regression check: a candidate result table against a baseline, point by point (measured
rows), or two compiled-resources tables.

The command's code and its documentation: runners/regression/measured.py.
"""
from runners.regression.measured import DEFAULTS, PROG, main  # noqa: F401 - the command's entry point

if __name__ == "__main__":
    raise SystemExit(main())
