"""key=value arguments of the table commands (runners.regress, plots.*): parsed over defaults, typed like them;
a bad one is a UsageError, one line on stderr and exit status 2."""
from __future__ import annotations

import functools
import sys


class UsageError(Exception):
    """A bad argument or unusable input: ``cli`` prints it as one line on stderr and exits 2."""


def cli(main):
    """Decorate a ``main(argv) -> int``: a UsageError becomes one line on stderr and exit status 2."""
    @functools.wraps(main)
    def wrapped(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except UsageError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    return wrapped


# --------------------------------------------------------------------------------------------------- arguments
def parse_args(argv: list[str] | None, defaults: dict, prog: str, usage: str) -> dict:
    """``key=value`` arguments (a leading ``--`` is allowed) over ``defaults``; types follow the default.

    ``None`` defaults are strings; booleans accept true/false/1/0/yes/no. Unknown keys and bad values are a
    one-line UsageError (exit 2). ``-h``/``--help`` prints ``usage`` and exits 0.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = dict(defaults)
    for token in argv:
        if token in ("-h", "--help", "help"):
            print(usage)
            raise SystemExit(0)
        key, sep, value = token.lstrip("-").partition("=")
        if not sep:
            raise UsageError(f"{prog}: expected key=value, got {token!r}; known keys: {', '.join(defaults)}")
        key = key.replace("-", "_")
        if key not in defaults:
            raise UsageError(f"{prog}: unknown key {key!r}; known keys: {', '.join(defaults)}")
        args[key] = coerce(prog, key, value, defaults[key])
    return args


def coerce(prog: str, key: str, value: str, default):
    if isinstance(default, bool):
        low = value.strip().lower()
        if low in ("true", "1", "yes", "on"):
            return True
        if low in ("false", "0", "no", "off"):
            return False
        raise UsageError(f"{prog}: {key}={value!r}: expected true or false")
    if isinstance(default, (int, float)):
        try:
            return type(default)(value)
        except ValueError:
            raise UsageError(f"{prog}: {key}={value!r}: expected a {type(default).__name__}") from None
    if value.strip().lower() in ("", "null", "none"):
        return None
    return value


def require(args: dict, key: str, prog: str) -> str:
    if not args.get(key):
        raise UsageError(f"{prog}: {key}=<path> is required")
    return args[key]
