"""Dependencies point one way: conf -> runners -> variants -> kernels; result tables -> plots.

An AST scan of every module's imports (module level and inside functions, `__import__` / `import_module` of a
literal name included), plus a fresh interpreter proving that the config schema and the table readers load
without the Triton kernels.
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROJECT = ("spec", "kernels", "variants", "runners", "plots")
FORBIDDEN = {  # package -> project packages it must never import
    "spec": {"kernels", "variants", "runners", "plots"},
    "kernels": {"variants", "runners", "plots"},
    "variants": {"runners", "plots"},
    "runners": {"plots"},
}


def imported_packages(path: Path) -> dict[str, int]:
    """Top-level package of every import in a file -> first line number."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("__import__", "import_module"):
                names = [node.args[0].value]
        for name in names:
            found.setdefault(name.split(".")[0], node.lineno)
    return found


def test_scanner_sees_every_import_form(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import plots.common\nfrom kernels import x\n"
                      "def f():\n    import variants\n    __import__('runners.sweep')\n")
    assert set(imported_packages(source)) == {"plots", "kernels", "variants", "runners"}


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_import_against_the_arrows(package):
    bad = []
    for path in sorted((REPO / package).rglob("*.py")):
        for name, line in imported_packages(path).items():
            if name in FORBIDDEN[package]:
                bad.append(f"{path.relative_to(REPO)}:{line} imports {name}")
    assert not bad, "imports against conf -> runners -> variants -> kernels, results -> plots:\n" + "\n".join(bad)


def test_spec_imports_nothing_heavy():
    for path in (REPO / "spec").rglob("*.py"):
        assert not set(imported_packages(path)) & {"torch", "triton", *PROJECT}, path


def test_schema_and_table_readers_load_without_kernels():
    """`runners.point.schema` (config checks) and `runners.tables` / `runners.regress` (reading tables) import no
    Triton kernel, no variant and no plot module."""
    code = ("import sys; import runners.point.schema, runners.tables, runners.regress, runners.regression.measured; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kernels', 'variants', 'plots')); "
            "print(bad); sys.exit(1 if bad else 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
