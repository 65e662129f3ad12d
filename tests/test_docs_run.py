"""The docs' commands that run on a CPU are run here, as written (issue 29); tests/test_docs.py checks every
command's module, keys and paths, this runs them. One test per fenced block (its commands in order: a block's
`runners.merge` comes before the `plots.cross_gpu` that reads its output) or inline command.

Each runs in a fresh folder holding a copy of `results/` (so `results=results/h200` reads the committed rows,
and rows and figures land in the copy), with this checkout on PYTHONPATH, and must exit 0. A command is not run
when a rule below says why: GPU work (a bf16 multirun: every point `unsupported` in the CPU interpreter), a
cluster, installs, this suite itself, changes to the repository. A new command in the docs is run unless a rule
names it.
"""
import os
import re
import shutil
import subprocess
import sys

import pytest

from runners.point import env
from tests.test_docs import COMMANDS, SYNOPSIS, split_commands

REPO = env.REPO

# (pattern on a command, why it is not run here); every rule must still match some documented command
NOT_RUN = [
    (r"^pip install ", "installs packages: .ci/run installs as the README says"),
    (r"^python -m pytest\b", "runs (part of) this test suite"),
    (r"hydra/launcher=slurm", "needs a Slurm cluster; bash scripts/slurm_smoke.sh runs the CPU recipe on one machine"),
    (r"hydra/launcher=local_gpus", "needs the GPUs of a node"),
    (r"slurm_smoke\.sh", "as root: installs and starts Slurm daemons"),
    (r"gpu_\w+\.sh|compile_check_triton\.sh|isolate_overhead\.py|fa4_install\.sh|forward_bench\.py",
     "a GPU machine's script"),
    (r"bound_args_check\.py|launch_(cost|stub)_cpu\.py|host_cost_cpu\.py",
     "CPU host-cost measurements and an sm90 compile (minutes); tests/test_launch.py checks the bound arguments"),
    (r"ptx_fingerprint\.py", "compiles every design's kernels for sm90 (minutes); tests/test_ptx_fingerprint.py runs a case"),
    (r"npot_wgmma_probe\.py", "an sm90 compile probe of Gluon's tile shapes, to run under each Triton (its answer is in its "
                               "docstring)"),
    (r"^(git|mv) ", "changes the repository (the baseline refresh recipe)"),
    (r"^for ", "the head of a loop of Slurm sweeps"),
    (r"^python -m [\w.]+$", "names a module in prose (its commands are run where the docs show them)"),
    (r"^python -m runners\.sweep -m (?!.*dtype=fp(16|32))", "a bf16 multirun: GPU work"),
    (r"^python -m runners\.tune ", "a bf16 study on a GPU; write_defaults=true rewrites conf/block_defaults.yaml"),
    (r"^python -m runners\.ab variant=ws\b", "ws's A/B: a Gluon design, GPU work (the interpreter case runs)"),
    (r"^python -m runners\.check ", "the GPU correctness check"),
    (r"^python -m runners\.model_step (?!model=tiny)", "a bf16 model: GPU work (model=tiny is the CPU smoke test)"),
    (r"submitit\.core\._submit", "what a Slurm job runs, not a command"),
    (r"^bash \.ci/run$", "CI itself: installs, then runs this suite"),
    (r"/shared/cluster/|results_new/", "a cluster's or a GPU run's folder"),
    (r"results/merged\.parquet", "merges / reads a cluster's sweeps (the Slurm recipe's results/); tests/test_merge.py"),
]


def not_run(command: str) -> str | None:
    for pattern, why in NOT_RUN:
        if re.search(pattern, command):
            return why
    return None


def groups():
    """(where, [commands]) per documented line group: one fenced block (its lines in order) or one inline span."""
    found: dict[str, list[tuple[str, ...]]] = {}
    for where, text, executable in COMMANDS:
        if not executable:
            continue
        page, _, line = where.partition(":")
        key = where if line == "inline" else page
        if SYNOPSIS.search(re.sub(r"(^|\s)#.*$", "", text)):  # a synopsis (`out=<file | folder>`): not run
            continue
        for words in split_commands(text):
            if not SYNOPSIS.search(" ".join(words)):
                found.setdefault(key if line == "inline" else f"{page}:{_block_start(page, int(line))}",
                                 []).append(tuple(words))
    return sorted(found.items())


def _block_start(page: str, line: int) -> int:
    """The line number of the fence that holds `line`."""
    lines = (REPO / page).read_text().split("\n")
    for n in range(line - 1, -1, -1):
        if lines[n].lstrip().startswith("```"):
            return n + 1
    return line


GROUPS = groups()
RUNNABLE = [(where, cmds) for where, cmds in GROUPS if any(not_run(" ".join(c)) is None for c in cmds)]
_passed: set[str] = set()  # a command already run as written in this process (the README's repeats)


def test_the_scan_finds_the_cpu_commands():
    commands = [" ".join(c) for _, cmds in RUNNABLE for c in cmds if not_run(" ".join(c)) is None]
    assert "python -m runners.sweep seq=256 batch=1 heads=2 head_dim=64 dtype=fp16" in commands
    assert any(c.startswith("python -m plots.report results=results/") for c in commands)
    assert any(c.startswith("python -m runners.regress ") for c in commands)


@pytest.mark.parametrize("pattern, why", NOT_RUN, ids=[w for _, w in NOT_RUN])
def test_every_rule_still_names_a_documented_command(pattern, why):
    assert any(re.search(pattern, " ".join(c)) for _, cmds in GROUPS for c in cmds), f"stale rule {pattern!r} ({why})"


@pytest.mark.skipif(not env.interpreting(), reason="the CPU commands, on a CPU")
@pytest.mark.parametrize("where, commands", RUNNABLE, ids=[w for w, _ in RUNNABLE])
def test_cpu_command_runs_as_written(where, commands, tmp_path):
    shutil.copytree(REPO / "results", tmp_path / "results")
    path = [str(REPO), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])]
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join(path),
               "TRITON_INTERPRET": "1", "MPLBACKEND": "Agg"}
    for words in commands:
        command = " ".join(words)
        if not_run(command) is not None or command in _passed:
            continue
        argv = [sys.executable, *words[1:]] if words[0] in ("python", "python3") else words
        if words[0] == "bash" or words[0].startswith("scripts/"):
            argv = [words[0], str(REPO / words[1]), *words[2:]] if words[0] == "bash" else [str(REPO / words[0])]
        before = set((tmp_path / "results").rglob("*.parquet"))
        run = subprocess.run(argv, cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, f"{where}: `{command}` exited {run.returncode}:\n{run.stderr[-2000:]}"
        assert "Traceback" not in run.stderr, f"{where}: `{command}` printed a traceback:\n{run.stderr[-2000:]}"
        bad = failed_rows(set((tmp_path / "results").rglob("*.parquet")) - before)
        assert not bad, f"{where}: `{command}` wrote failed rows: {bad}"
        _passed.add(command)


def failed_rows(paths) -> list[str]:
    """'variant: status (reason)' of the rows among `paths` (a sweep's new row files) that are wrong or failed:
    a documented sweep that exits 0 with a wrong row does not run as written."""
    import pandas as pd
    bad = []
    for path in sorted(paths):
        for _, row in pd.read_parquet(path).iterrows():
            if row.get("status") in ("wrong", "oom", "compile_error", "resources", "error", "crashed", "timeout"):
                bad.append(f"{row.get('variant')}: {row['status']} ({row.get('reason')})")
    return bad


def test_failed_rows_names_wrong_and_failed_rows(tmp_path):
    import pandas as pd
    path = tmp_path / "rows.parquet"
    pd.DataFrame([{"variant": "two_pass", "status": "wrong", "reason": "rel_dq=1"},
                  {"variant": "atomic_tma", "status": "unsupported", "reason": "no"},
                  {"variant": "atomic", "status": "ok", "reason": ""}]).to_parquet(path)
    assert failed_rows([path]) == ["two_pass: wrong (rel_dq=1)"]
