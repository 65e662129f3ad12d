"""README.md and docs/*.md: every command they show still works as written, every relative link resolves.

Commands are read from fenced bash/sh/shell/console blocks and from inline code spans. A fenced block marked
`text` (or any other language) is an example, not a command; its `python -m X` still has to name a module that
exists. A line with a placeholder (`<path>`, `[optional]`, `...`) is a synopsis: only its module is checked.
"""
import functools
import importlib
import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra

from runners.point import env

REPO = env.REPO
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_FENCES = ("bash", "sh", "shell", "console")
HYDRA_FLAGS_WITH_VALUE = ("--cfg", "-c", "--package", "-p", "--config-name", "-cn", "--config-dir", "-cd")
SYNOPSIS = re.compile(r"<[^>]*>|\[[^\]]*\]|\.\.\.|…")
SHELL_STOP = {"&", "&&", ";", "|", "||", "do", "done", "then", "fi", "wait"}


def blocks(text: str):
    """(language, body, first line number) of every fenced block, and the text outside them."""
    fences, outside, lines = [], [], text.split("\n")
    i = 0
    while i < len(lines):
        match = re.match(r"^\s*```(\w*)", lines[i])
        if match:
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            fences.append((match.group(1), body, start + 1))
        else:
            outside.append((i + 1, lines[i]))
        i += 1
    return fences, outside


def shell_lines(body: list[str], first: int, console: bool):
    """Logical lines of a shell block (backslash continuations joined), with their line numbers."""
    logical, start, buffer = [], None, ""
    for n, line in enumerate(body, first):
        if console:
            if not line.startswith("$ "):
                continue
            line = line[2:]
        start = n if not buffer else start
        if line.rstrip().endswith("\\"):
            buffer += line.rstrip()[:-1] + " "
            continue
        logical.append((start, buffer + line))
        buffer = ""
    return logical


def commands():
    """(page:line, command text, executable) for every command the pages show."""
    found = []
    for page in PAGES:
        name = page.relative_to(REPO)
        fences, outside = blocks(page.read_text())
        for lang, body, first in fences:
            if lang in SHELL_FENCES:
                for n, line in shell_lines(body, first, console=lang == "console"):
                    found.append((f"{name}:{n}", line, True))
            else:
                for n, line in enumerate(body, first):
                    if re.search(r"python3? -m ", line):
                        found.append((f"{name}:{n}", line, False))
        prose = "\n".join(line for _, line in outside)
        for span in re.findall(r"`([^`]+)`", prose):
            span = " ".join(span.split())
            if re.match(r"(python3? -m |pip install |bash |scripts/)", span):
                found.append((f"{name}:inline", span, True))
    return found


def split_commands(line: str) -> list[list[str]]:
    """The simple commands of one shell line: comments dropped, $VAR / $(...) replaced by a word."""
    line = re.sub(r"\$\([^)]*\)", "X", line)
    line = re.sub(r"\$\{?\w+\}?", "X", line)
    try:
        tokens = shlex.split(line, comments=True)
    except ValueError as exc:
        raise AssertionError(f"unparsable shell line {line!r}: {exc}") from None
    parts, current = [], []
    for token in tokens:
        bare = token.rstrip(";&")
        if token in SHELL_STOP or bare in SHELL_STOP:
            parts.append(current)
            current = []
            continue
        current.append(bare)
        if token != bare:  # `x;` ends a command
            parts.append(current)
            current = []
    parts.append(current)
    return [p for p in parts if p]


# ---- checkers ------------------------------------------------------------------------------------------

def module_exists(module: str) -> None:
    assert importlib.util.find_spec(module) is not None, f"no module {module}"


@functools.cache
def help_text(module: str) -> str:
    run = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, f"python -m {module} --help failed: {run.stderr[-500:]}"
    return run.stdout


def check_sweep(args: list[str]) -> None:
    """Composes and checks every point, as `python -m runners.sweep --cfg job ...` would (no measuring)."""
    from runners import sweep

    overrides, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in HYDRA_FLAGS_WITH_VALUE:
            skip = True
        elif not arg.startswith("-") or arg in ("-m", "--multirun"):
            overrides.append(arg)
    overrides, multirun, _ = sweep.split_argv(overrides)
    GlobalHydra.instance().clear()
    try:
        assert sweep.preflight(overrides, multirun) >= 1
    finally:
        GlobalHydra.instance().clear()


def check_python_module(module: str, args: list[str]) -> None:
    module_exists(module)
    if module == "runners.sweep":
        return check_sweep(args)
    if module == "pytest":
        for arg in args:
            if not arg.startswith("-") and arg.startswith("tests"):
                path = REPO / arg.split("::")[0]
                assert path.exists(), f"no test file or folder {arg}"
        return None
    mod = importlib.import_module(module)
    if hasattr(mod, "DEFAULTS") and hasattr(mod, "PROG"):  # key=value commands (plots.*, runners.regress)
        from runners.tables import parse_args
        return parse_args(args, mod.DEFAULTS, mod.PROG, "")
    if module == "runners.merge":  # inputs (paths) and out=
        assert any(a.startswith(("out=", "--out=")) for a in args), "runners.merge needs out="
        assert all("=" not in a or a.startswith(("out=", "--out=")) for a in args), f"bad arguments {args}"
        return None
    flags = [a.split("=")[0] for a in args if a.startswith("--")]
    if flags:  # argparse-style commands (runners.check): every flag is one the module's --help lists
        text = help_text(module)
        missing = [f for f in flags if not re.search(re.escape(f) + r"\b", text)]
        assert not missing, f"python -m {module}: unknown flags {missing}"
    return None


def pyproject_extras() -> set:
    text = (REPO / "pyproject.toml").read_text()
    try:
        import tomllib  # Python >= 3.11
    except ModuleNotFoundError:  # 3.10: the keys of the [project.optional-dependencies] table
        section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
        return set(re.findall(r"^([\w-]+)\s*=", section, flags=re.M))
    return set(tomllib.loads(text)["project"]["optional-dependencies"])


def check_pip(args: list[str]) -> None:
    extras = pyproject_extras()
    for arg in args:
        match = re.fullmatch(r"\.\[([\w,-]+)\]", arg)
        if match:
            for extra in match.group(1).split(","):
                assert extra in extras, f"pyproject.toml has no extra {extra!r}"


def check_command(words: list[str]) -> None:
    if words[0] in ("python", "python3") and len(words) > 2 and words[1] == "-m":
        return check_python_module(words[2], words[3:])
    if words[0] == "pip" and words[1:2] == ["install"]:
        return check_pip(words[2:])
    if words[0] == "bash" and len(words) > 1:
        assert (REPO / words[1]).is_file(), f"no script {words[1]}"
    if words[0].startswith("scripts/"):
        assert (REPO / words[0]).is_file(), f"no script {words[0]}"
    return None


COMMANDS = commands()


def test_the_pages_show_commands():
    """The scan itself works: the README's headline, test and CPU commands are found."""
    texts = [text for _, text, _ in COMMANDS]
    assert any("runners.sweep seq=4096 variant=two_pass" in t for t in texts)
    assert any(t.startswith("python -m pytest -q tests") for t in texts)
    assert len(COMMANDS) > 30


@pytest.mark.parametrize("where, text, executable", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_documented_command_still_works(where, text, executable):
    if not executable:  # an example: its modules exist
        for module in re.findall(r"python3? -m ([\w.]+)", text):
            module_exists(module)
        return
    for words in split_commands(text):
        if SYNOPSIS.search(" ".join(words)):  # a synopsis: its module exists
            if words[0] in ("python", "python3") and words[1:2] == ["-m"] and re.fullmatch(r"[\w.]+", words[2]):
                module_exists(words[2])
            continue
        check_command(words)


@pytest.mark.parametrize("words", [
    ["python", "-m", "runners.nope"], ["python", "-m", "runners.sweep", "seqq=5"],
    ["python", "-m", "runners.sweep", "-m", "variant=atomic", "blocks.BLOCK_M=48"],
    ["python", "-m", "plots.compare", "colour=red"], ["python", "-m", "runners.check", "--sequence", "4096"],
    ["python", "-m", "pytest", "-q", "tests/test_nothing.py"], ["pip", "install", "-e", ".[nope]"],
    ["bash", "scripts/nope.sh"],
], ids=lambda w: " ".join(w))
def test_a_broken_command_fails(words):
    """The checker can fail: commands that no longer work are caught."""
    with pytest.raises(Exception):  # noqa: B017 - AssertionError, ConfigError, UsageError: any refusal
        check_command(words)


def links():
    found = []
    for page in PAGES:
        prose = re.sub(r"`[^`\n]*`", "", page.read_text())  # code spans are not links: `kernel[grid](...)`
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
                found.append((page, target))
    return found


@pytest.mark.parametrize("page, target", links(), ids=lambda x: x.name if isinstance(x, Path) else x)
def test_relative_links_resolve(page, target):
    assert (page.parent / target.split("#")[0]).exists(), f"{page.name}: broken link {target}"


def test_ci_runs_the_readme_commands():
    """CI installs as the README says and runs the README's test command."""
    readme = (REPO / "README.md").read_text()
    ci_lines = [re.sub(r"^python3 ", "python ", line.strip()) for line in (REPO / ".ci" / "run").read_text().split("\n")]
    test_commands = [line for line in ci_lines if line.startswith("python -m pytest")]
    assert test_commands == ["python -m pytest -q tests"] and "python -m pytest -q tests  " in readme
    for package in ("torch==2.13.0", '-e ".[test]"'):
        assert any(package in line for line in ci_lines if "pip install" in line)
        assert f"pip install {package}" in readme
