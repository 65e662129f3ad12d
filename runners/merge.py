"""`python -m runners.merge`: Merge result rows from many jobs and machines into one table.

The command's code and its documentation: runners/tables/merge.py.
"""
from runners.tables.merge import main  # noqa: F401 - the command's entry point

if __name__ == "__main__":
    raise SystemExit(main())
