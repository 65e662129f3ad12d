"""What runners.sweep tells a user (issue 29): `--help` starts with a short usage page (the headline command,
the main keys, where rows go, the next commands) before Hydra's help; a finished run prints the command that
plots its rows, and that command works; a rerun's summary counts the rows already on disk; a config error is
its one line, with no CPU banner before it."""
import os
import shlex
import subprocess
import sys

import pytest

from runners import sweep
from runners.point import env
from tests.test_sweep_accounting import SMALL, clean_hydra, run_cli  # noqa: F401 (clean_hydra: autouse fixture)

pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")


def test_help_starts_with_the_usage_page():
    run = subprocess.run([sys.executable, "-m", "runners.sweep", "--help"], cwd=env.REPO, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("usage: python -m runners.sweep [-m] [key=value ...]")
    usage, _, groups = run.stdout.partition("== Configuration groups ==")
    for needle in ("python -m runners.sweep seq=4096 variant=two_pass", "results_dir=", "<results_dir>/<gpu>/<sweep_id>/",
                   "python -m plots.compare", "python -m plots.report", "python -m runners.regress"):
        assert needle in usage, needle
    variant_line = next(line for line in groups.splitlines() if line.startswith("variant: "))
    assert {"two_pass", "ws", "sdpa_cudnn"} <= set(variant_line[len("variant: "):].split(", "))
    assert "--hydra-help" in groups  # Hydra's own help, which composes the config
    assert "CPU run (no GPU)" not in run.stdout


def test_help_and_a_typo_answer_without_importing_torch():
    """--help and an unknown key are answered before torch, Triton and the designs are imported (issue 45: 10-16 s
    on a 2-core machine before, import torch alone 3.6 s)."""
    for argv, code in ((["--help"], 0), (["sequ=1"], 2)):
        run = subprocess.run([sys.executable, "-X", "importtime", "-m", "runners.sweep", *argv], cwd=env.REPO,
                             capture_output=True, text=True, timeout=120, env={**os.environ, "TRITON_INTERPRET": ""})
        assert run.returncode == code, run.stderr[-2000:]
        imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
        assert not imported & {"torch", "triton", "variants", "pandas"}, argv
    assert "config error: unknown key 'sequ'; did you mean 'seq'?" in run.stderr


def test_a_config_error_has_no_banner_before_it(tmp_path, capsys):
    code, out, err = run_cli(["seqlen=128", f"results_dir={tmp_path / 'r'}"], tmp_path, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, (out, err)


def test_a_rerun_counts_the_rows_on_disk_and_prints_a_working_plot_command(tmp_path, capsys, monkeypatch):
    argv = ["-m", *SMALL, f"results_dir={tmp_path / 'results'}"]
    code, out, err = run_cli([*argv, "causal=true", "sweep_id=first"], tmp_path, capsys)
    assert code == 0, err
    assert "sweep first: 1 rows (1 ok)" in out
    code, out, err = run_cli([*argv, "causal=true,false", "sweep_id=second"], tmp_path, capsys)
    assert code == 0, err
    assert "sweep second: 2 rows (1 already on disk, 1 new; 2 ok)" in out
    plot = [line for line in out.splitlines() if line.startswith("plot: ")]
    assert len(plot) == 1 and plot[0].endswith(" dtype=fp16"), out
    words = shlex.split(plot[0][len("plot: "):])
    assert words[:3] == ["python", "-m", "plots.compare"]
    from plots import compare

    monkeypatch.chdir(env.REPO)  # the folder the command was printed for
    assert compare.main([*words[3:], f"out={tmp_path / 'figures'}"]) == 0
    assert list((tmp_path / "figures").glob("compare_*_fp16.png"))


def test_a_single_point_prints_the_plot_command_for_its_gpu(tmp_path, capsys):
    code, out, err = run_cli([*SMALL, f"results_dir={tmp_path / 'results'}"], tmp_path, capsys)
    assert code == 0, err
    assert f"plot: python -m plots.compare results={tmp_path / 'results' / 'cpu-interpreter'} dtype=fp16" in out
    assert out.splitlines()[0].startswith("CPU run (no GPU)")  # the banner, once the config is checked
