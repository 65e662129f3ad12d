"""Name -> variant. A variant file registers itself with @register_variant("name").

Where variants come from, in registration order (the order tables and plots list them):
1. the designs in this package (variants/__init__.py imports every module of it);
2. modules named in $FLASH_BWD_PLUGINS (comma-separated, importable from sys.path / PYTHONPATH), e.g. a design
   kept as two files outside the repo (docs/interface.md, "Adding a design");
3. installed packages' entry points of the group `flash_bwd.variants` (importlib.metadata), e.g.
   `[project.entry-points."flash_bwd.variants"] my_design = "my_pkg.variant"` in their pyproject.toml.
2 and 3 are loaded lazily, on the first `get()`, `names()` or `registered()`, in every process that asks (the
runner, its worker, the tuner, the plots, the tests). One that fails to load is not fatal: one warning line on
stderr, and `get()` of its name says why it is missing.
"""
import importlib
import os
import sys

ENTRY_POINT_GROUP = "flash_bwd.variants"
PLUGINS_ENV = "FLASH_BWD_PLUGINS"

_VARIANTS: dict = {}
_external = {"loaded": False, "failed": {}}  # failed: {design or module name: one-line reason}


def register_variant(name: str):
    def decorate(cls):
        if name in _VARIANTS:
            raise ValueError(f"variant {name!r} registered twice")
        cls.name = name
        _VARIANTS[name] = cls()
        return cls
    return decorate


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _entry_points() -> list:
    from importlib.metadata import entry_points
    found = entry_points(group=ENTRY_POINT_GROUP)
    return sorted({(ep.name, ep.value): ep for ep in found}.values(), key=lambda ep: ep.name)  # one per (name, value)


def load_external() -> None:
    """Imports the $FLASH_BWD_PLUGINS modules, then loads every `flash_bwd.variants` entry point (once per process).

    An entry point names a module that registers its designs with @register_variant (`name = "pkg.module"`), or a
    Variant class (`name = "pkg.module:MyDesign"`), registered under the entry point's name if it is not yet."""
    if _external["loaded"]:
        return
    _external["loaded"] = True
    import variants  # noqa: F401 - the package's own designs register first
    from variants.base import Variant

    failed = _external["failed"]
    for module in (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(",")):
        if module:
            try:
                importlib.import_module(module)
            except Exception as exc:  # noqa: BLE001 - the plugin's own error at import, reported, not fatal
                failed[module] = f"${PLUGINS_ENV} module {module!r} failed to import: {_one_line(exc)}"
    try:
        points = _entry_points()
    except Exception as exc:  # noqa: BLE001 - unreadable installed metadata: no entry-point designs
        points = []
        failed[ENTRY_POINT_GROUP] = f"cannot read the {ENTRY_POINT_GROUP} entry points: {_one_line(exc)}"
    for ep in points:
        try:
            loaded = ep.load()
            if isinstance(loaded, type) and issubclass(loaded, Variant) and ep.name not in _VARIANTS \
                    and loaded not in {type(v) for v in _VARIANTS.values()}:
                register_variant(ep.name)(loaded)
        except Exception as exc:  # noqa: BLE001 - a broken installed package must not hide the others
            failed[ep.name] = (f"entry point {ep.name} = {ep.value} ({ENTRY_POINT_GROUP}) failed to load: "
                               f"{_one_line(exc)}")
    for reason in failed.values():
        print(f"warning: {reason}", file=sys.stderr)


def unknown_text(name: str) -> str:
    """'unknown variant 'x'; known: a, b, ...' (plus why an external design of that name is missing)."""
    text = f"unknown variant {name!r}; known: {', '.join(names())}"
    why = _external["failed"].get(name)
    return text + (f" ({why})" if why else "")


def get(name: str):
    """The registered variant instance; ValueError naming the known ones otherwise."""
    load_external()
    try:
        return _VARIANTS[name]
    except KeyError:
        raise ValueError(unknown_text(name)) from None


def names() -> list[str]:
    load_external()
    return sorted(_VARIANTS)


def registered() -> list[str]:
    """The names in registration order (variants/__init__.py's import order, then $FLASH_BWD_PLUGINS, entry points
    and `plugins=` modules): the order tables and plots list designs in (runners.tables.VARIANT_ORDER)."""
    load_external()
    return list(_VARIANTS)
