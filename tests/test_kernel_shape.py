"""The kernels stay made of parts a reader can name (issue 41): in kernels/, no @triton.jit / @gluon.jit function
takes more than MAX_PARAMS parameters (constexprs included), no assignment unpacks more than MAX_UNPACK names, and
no file is longer than MAX_LINES lines. Checked on the source with `ast` (nothing is imported or compiled).

KNOWN would hold breaches still to restructure (a listed one may shrink or go: then drop it here; a new one fails).
It is empty: the stock kernels pass a StepConfig / TmaConfig record and grouped runtime records (issue 41), like
kernels/gluon/.
"""
import ast
from pathlib import Path

import pytest

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
MAX_PARAMS = 20
MAX_UNPACK = 6
MAX_LINES = 450

KNOWN: dict[str, set[str]] = {}  # file -> its breaches still to restructure (issue 41): none left


def _is_jit(decorator: ast.expr) -> bool:
    """@triton.jit, @gluon.jit, @jit, with or without arguments."""
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return name == "jit"


def _unpacked_names(target: ast.expr) -> int:
    if isinstance(target, (ast.Tuple, ast.List)):
        return sum(_unpacked_names(t) for t in target.elts)
    return 1


def breaches(path: Path) -> dict[str, str]:
    """{breach: what it is} of one file: 'lines', 'params:<function>', 'unpack' (any assignment over the limit)."""
    source = path.read_text()
    found = {}
    lines = source.count("\n") + (not source.endswith("\n"))
    if lines > MAX_LINES:
        found["lines"] = f"{lines} lines"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(map(_is_jit, node.decorator_list)):
            a = node.args
            count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)
            if count > MAX_PARAMS:
                found[f"params:{node.name}"] = f"{node.name} takes {count} parameters (line {node.lineno})"
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.For, ast.AnnAssign)) else []
        for target in targets:
            names = _unpacked_names(target)
            if names > MAX_UNPACK and "unpack" not in found:
                found["unpack"] = f"line {node.lineno} unpacks {names} names"
    return found


FILES = sorted(p.relative_to(KERNELS).as_posix() for p in KERNELS.rglob("*.py"))


@pytest.mark.parametrize("name", FILES)
def test_kernel_file_shape(name):
    found = breaches(KERNELS / name)
    new = {k: v for k, v in found.items() if k not in KNOWN.get(name, set())}
    assert not new, f"kernels/{name}: " + "; ".join(new.values()) + \
        f" (limits: {MAX_PARAMS} parameters per jitted function, {MAX_UNPACK} names per unpacking, {MAX_LINES} lines)"


def test_known_breaches_are_current():
    """A listed breach that is gone is dropped from KNOWN, so the list only shrinks."""
    stale = {name: sorted(kinds - set(breaches(KERNELS / name))) for name, kinds in KNOWN.items()}
    assert not any(stale.values()), f"fixed, drop from KNOWN: {stale}"


def test_the_gluon_kernels_have_no_known_breach():
    assert not [name for name in KNOWN if name.startswith("gluon/")]


def test_the_rules_catch_a_breach(tmp_path):
    params = ", ".join(f"a{i}" for i in range(MAX_PARAMS + 1))
    names = ", ".join(f"b{i}" for i in range(MAX_UNPACK + 1))
    path = tmp_path / "k.py"
    path.write_text(f"@triton.jit\ndef f({params}):\n    {names} = a0\n" + "\n" * MAX_LINES)
    assert set(breaches(path)) == {"params:f", "unpack", "lines"}
