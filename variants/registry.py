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
