"""`python -m runners.model_step`: The model-step benchmark: forward + backward + AdamW step of a small decoder, per
design.

The command's code and its documentation: runners/model/step.py.
"""
import sys

from runners.model.step import main  # noqa: F401 - the command's entry point

if __name__ == "__main__":
    sys.exit(main())
