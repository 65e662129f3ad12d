"""Functions an isolated worker runs in tests/test_prestart.py; stdlib only, so that unpickling one imports nothing
that the worker's own start did not."""
import os
import sys


def loaded(name: str) -> dict:
    """Whether module `name` was imported in this process before this call."""
    return {"status": "ok", "loaded": name in sys.modules, "pid": os.getpid()}
