"""A module imported when it is first used: the command-line entry points (`--help`, a config error) answer in a
second or two on a 2-core machine instead of paying for torch, Triton and the designs up front."""
import importlib


class Module:
    """Stands for the module `name`; each attribute is looked up on the imported module (so a test's monkeypatch of
    the module is seen)."""

    def __init__(self, name: str):
        self.__dict__["_name"] = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):  # copy / pickle probing a bare instance: not the module's
            raise AttributeError(attr)
        return getattr(importlib.import_module(self.__dict__["_name"]), attr)

    def __reduce__(self):  # a launcher pickles the sweep's globals for its job processes
        return Module, (self.__dict__["_name"],)

    def __repr__(self) -> str:
        return f"<deferred module {self._name!r}>"
