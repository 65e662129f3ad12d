"""runners.sweep never reports success when it lost rows (issue 29): a point whose row cannot be written is one
line and a count ("1 of 2 points not recorded: ..."), exit status 4, single run or multirun; results_dir is
checked before anything is measured (a one-line config error, exit 2); an unknown key names the closest valid
one and is never Hydra's `+key` hint. CPU interpreter, small fp16 points."""
import os
import subprocess
import sys

import pytest
from hydra.core.global_hydra import GlobalHydra

from runners import sweep
from runners.point import env
from runners.tables import results

SMALL = ["seq=64", "batch=1", "heads=1", "head_dim=16", "dtype=fp16", "bench.cpu_warmup=0", "bench.cpu_rep=1"]
pytestmark = pytest.mark.skipif(not env.interpreting(), reason="runner tests are for the CPU interpreter")


@pytest.fixture(autouse=True)
def clean_hydra(monkeypatch):
    GlobalHydra.instance().clear()
    monkeypatch.setattr(sys, "argv", ["runners/sweep.py"])
    yield
    GlobalHydra.instance().clear()


def run_cli(argv, tmp_path, capsys):
    """sweep.cli in process: (exit status, stdout, stderr)."""
    code = 0
    try:
        sweep.cli([*argv, f"hydra.run.dir={tmp_path / 'out'}", f"hydra.sweep.dir={tmp_path / 'multirun'}"])
    except SystemExit as exc:
        code = exc.code
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def failing_write(monkeypatch, when=lambda row: True):
    real = results.write_row

    def write_row(row, directory, index, key):
        if when(row):
            raise PermissionError(13, "Permission denied", str(directory))
        return real(row, directory, index, key)

    monkeypatch.setattr(results, "write_row", write_row)


def test_single_point_not_recorded_is_one_line_and_exit_4(tmp_path, monkeypatch, capsys):
    failing_write(monkeypatch)
    code, out, err = run_cli([*SMALL, f"results_dir={tmp_path / 'results'}"], tmp_path, capsys)
    assert code == sweep.EXIT_LOST == 4, err
    assert "Traceback" not in err
    assert "1 of 1 point not recorded: PermissionError" in err, err
    assert err.strip().splitlines()[-1].startswith("1 of 1 point not recorded")


def test_multirun_counts_the_points_it_could_not_record(tmp_path, monkeypatch, capsys):
    failing_write(monkeypatch, when=lambda row: row["variant"] == "two_pass")
    code, out, err = run_cli(["-m", *SMALL, "variant=two_pass,sdpa_flash", "causal=true,false",
                              f"results_dir={tmp_path / 'results'}"], tmp_path, capsys)
    assert code == 4, err
    assert "2 of 4 points not recorded: PermissionError: [Errno 13] Permission denied" in err, err
    assert err.count("runner error, point not recorded") == 2
    assert "2 rows" in out  # the summary still prints the rows that were written
    assert len(results.load(tmp_path / "results")) == 2


def test_a_sweep_that_records_everything_still_exits_0(tmp_path, capsys):
    code, out, err = run_cli(["-m", *SMALL, "variant=sdpa_flash", "causal=true,false",
                              f"results_dir={tmp_path / 'results'}"], tmp_path, capsys)
    assert code == 0, err
    assert "not recorded" not in err


def test_lost_line_names_the_commonest_reason():
    assert sweep.lost_line(["a", "b", "a"], 6) == "3 of 6 points not recorded: a (and 1 other reason(s)) (exit status 4)"


def _file(tmp_path):
    path = tmp_path / "a-file"
    path.write_text("not a folder")
    return str(path)


@pytest.mark.parametrize("results_dir, needle", [
    (lambda tmp: "", "is empty"),
    (_file, "is a file, not a folder"),
    (lambda tmp: _file(tmp) + "/rows", "cannot be created"),
], ids=["empty", "file", "under-a-file"])
@pytest.mark.parametrize("multirun", [False, True], ids=["single", "multirun"])
def test_bad_results_dir_is_a_config_error_before_measuring(tmp_path, capsys, monkeypatch, results_dir, needle,
                                                            multirun):
    monkeypatch.chdir(tmp_path)
    value = results_dir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    measured = []
    monkeypatch.setattr(sweep, "run_point", lambda *a, **k: measured.append(1))
    argv = (["-m", *SMALL, "causal=true,false"] if multirun else SMALL) + [f"results_dir={value}"]
    code, out, err = run_cli(argv, tmp_path, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("config error: results_dir") and needle in err, err
    assert "Traceback" not in err
    assert not measured
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written, not even in the cwd


def test_unwritable_results_dir_is_a_config_error(tmp_path, capsys, monkeypatch):
    """chmod does not stop root, so the refusal of the write probe is simulated."""
    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(sweep.tempfile, "mkstemp", refuse)
    code, out, err = run_cli([*SMALL, f"results_dir={tmp_path / 'ro' / 'rows'}"], tmp_path, capsys)
    assert code == 2
    assert err.strip() == (f"config error: results_dir: '{tmp_path / 'ro' / 'rows'}' is not writable (its folder "
                           f"'{tmp_path}' is not writable): Permission denied")


def test_results_dir_that_does_not_exist_yet_is_fine(tmp_path):
    sweep.check_results_dir(str(tmp_path / "new" / "deeper"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, line", [
    (["seqlen=128"], "config error: unknown key 'seqlen'; did you mean 'seq'?"),
    (["+seqlen=128"], "config error: unknown key 'seqlen'; did you mean 'seq'?"),
    (["-m", "seqlen=128,256"], "config error: unknown key 'seqlen'; did you mean 'seq'?"),
    (["-m", "seq=64,128", "+seqlen=128"], "config error: unknown key 'seqlen'; did you mean 'seq'?"),
    (["bench.warmpu=1"], "config error: unknown key 'bench.warmpu'; did you mean 'bench.warmup'?"),
    (["+seq=128"], "config error: '+seq=128': 'seq' is a config key; set it without '+': seq=128"),
    (["+frobnicate=1"], "config error: unknown key 'frobnicate'; see `python -m runners.sweep --cfg job` for the keys"),
    (["blocks.BLOCK_M=7"], "config error: unknown key 'blocks.BLOCK_M' (variant two_pass has block fields: BLOCK_M1, "
                           "BLOCK_N1, num_warps1, num_stages1, BLOCK_M2, BLOCK_N2, num_warps2, num_stages2, "
                           "longest_first, prescale, split_dkdv, split_d); did you mean 'blocks.BLOCK_M1'?"),
    (["blocks.block_n1=64"], "config error: unknown key 'blocks.block_n1' (variant two_pass has block fields: BLOCK_M1, "
                             "BLOCK_N1, num_warps1, num_stages1, BLOCK_M2, BLOCK_N2, num_warps2, num_stages2, "
                             "longest_first, prescale, split_dkdv, split_d); did you mean 'blocks.BLOCK_N1'?"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_unknown_key_names_the_closest_valid_one(tmp_path, capsys, monkeypatch, argv, line):
    monkeypatch.setattr(sweep, "run_point", lambda *a, **k: pytest.fail("measured"))
    code, out, err = run_cli([*argv, f"results_dir={tmp_path / 'results'}"], tmp_path, capsys)
    assert code == 2
    assert err.strip() == line
    assert "+seqlen" not in err.replace(argv[-1], "") and "To append" not in err
    assert not (tmp_path / "results").exists()


def test_unknown_key_through_the_command_line(tmp_path):
    run = subprocess.run([sys.executable, "-m", "runners.sweep", "seqlen=128", f"results_dir={tmp_path / 'r'}"],
                         cwd=env.REPO, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TRITON_INTERPRET": "1"})
    assert run.returncode == 2
    assert run.stderr.strip() == "config error: unknown key 'seqlen'; did you mean 'seq'?"


def test_a_grid_point_that_breaks_a_block_rule_is_a_row_and_the_rest_run(tmp_path, capsys):
    """One invalid block combination in a -m product grid is an `unsupported` row naming the rule it broke; the
    other points are measured (before: the whole multirun stopped with a config error, nothing measured)."""
    code, out, err = run_cli(["-m", *SMALL, "variant=atomic", "blocks.BLOCK_M=16,48",
                              f"results_dir={tmp_path / 'results'}"], tmp_path, capsys)
    assert code == 0, err
    assert "1 of 2 points break a block rule" in out
    df = results.load(tmp_path / "results").set_index("BLOCK_M")
    assert df.loc[16, "status"] == "ok" and df.loc[48, "status"] == "unsupported"
    assert df.loc[48, "reason"].startswith("block rule: blocks.BLOCK_M=48: must be a power of two")


def test_a_single_point_that_breaks_a_block_rule_is_still_a_config_error(tmp_path, capsys):
    code, out, err = run_cli([*SMALL, "variant=atomic", "blocks.BLOCK_M=48", f"results_dir={tmp_path / 'results'}"],
                             tmp_path, capsys)
    assert code == sweep.EXIT_CONFIG and err.startswith("config error: blocks.BLOCK_M=48: must be a power of two")
