"""Name -> variant. A variant file registers itself with @register_variant("name")."""
_VARIANTS: dict = {}


def register_variant(name: str):
    def decorate(cls):
        if name in _VARIANTS:
            raise ValueError(f"variant {name!r} registered twice")
        cls.name = name
        _VARIANTS[name] = cls()
        return cls
    return decorate


def get(name: str):
    """The registered variant instance; ValueError naming the known ones otherwise."""
    try:
        return _VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r}; known: {', '.join(names())}") from None


def names() -> list[str]:
    return sorted(_VARIANTS)


def registered() -> list[str]:
    """The names in registration order (variants/__init__.py's import order, then plugins): the order tables and
    plots list designs in (runners.tables.VARIANT_ORDER)."""
    return list(_VARIANTS)
