"""Readers that never lie: a corrupt or foreign file under a results path is named in one line. The loader
refuses it (strict) or skips it with a one-line warning; runners.regress exits 2 on it (never 1, which
means "regression found"); runners.merge refuses it unless strict=false, and then says what it skipped;
the plots skip it. No traceback reaches the user."""
import os
import subprocess
import sys

import pandas as pd
import pytest

from plots import _synthetic as S
from runners.point import env
from runners.tables import merge, results
from runners.regression import measured as regress

SEQS, HEAD_DIMS, VARIANTS = (1024,), (64, 128), ("two_pass", "atomic")


def good_table() -> pd.DataFrame:
    return S.table(seqs=SEQS, head_dims=HEAD_DIMS, variants=VARIANTS, failures=False)


def _truncated(path):
    good_table().to_parquet(path, index=False)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _csv(path):
    path.write_text(good_table().to_csv(index=False))  # a CSV renamed .parquet


def _missing_columns(path):
    good_table().drop(columns=["status", "correct"]).to_parquet(path, index=False)


def _foreign(path):
    pd.DataFrame({"epoch": [1, 2], "loss": [0.5, 0.4]}).to_parquet(path, index=False)


def _empty(path):
    path.write_bytes(b"")


def _directory(path):
    path.mkdir()  # stands in for an unreadable file where chmod cannot block reads (tests run as root)
    (path / "notes.txt").write_text("x")


def _broken_link(path):
    os.symlink(path.parent / "gone.parquet", path)


def _unreadable(path):
    good_table().to_parquet(path, index=False)
    os.chmod(path, 0)
    if os.access(path, os.R_OK):  # root reads anything: _directory and _broken_link cover this case
        os.chmod(path, 0o644)
        pytest.skip("chmod 000 does not block reads here (running as root)")


FIXTURES = {"truncated": (_truncated, "not a readable parquet table"), "csv": (_csv, "not a readable parquet table"),
            "missing_columns": (_missing_columns, "missing column(s) status, correct"),
            "foreign": (_foreign, "not a flash-bwd result table"), "empty": (_empty, "empty file"),
            "directory": (_directory, "not a regular file (a directory)"),
            "broken_link": (_broken_link, "not a regular file"), "unreadable": (_unreadable, "permission denied")}


@pytest.fixture(params=list(FIXTURES))
def bad(request, tmp_path):
    """(results folder holding good per-point rows and one bad file, the bad file, expected words)."""
    make, words = FIXTURES[request.param]
    folder = tmp_path / "results" / "gpu" / "sweep"
    S.write(good_table(), folder, per_row=True)
    path = folder / "00099-bad.parquet"
    make(path)
    yield tmp_path / "results", path, words
    if path.exists() and not path.is_symlink() and path.is_file():
        os.chmod(path, 0o644)  # let pytest clean up


def one_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


def test_load_names_the_bad_file_in_one_line(bad):
    folder, path, words = bad
    for target in (folder, path) if not path.is_dir() else (folder,):  # a folder given by name is searched
        with pytest.raises(results.TableError) as info:
            results.load(target)
        line = one_line(str(info.value))
        assert str(path) in line and words in line


def test_load_not_strict_skips_it_with_a_warning(bad):
    folder, path, words = bad
    warned = []
    df = results.load(folder, strict=False, warn=warned.append)
    assert len(df) == len(good_table())  # every good row, nothing of the bad file
    assert len(warned) == 1 and str(path) in warned[0] and words in warned[0]


def test_regress_exits_2_naming_the_file(bad, tmp_path, capsys):
    folder, path, words = bad
    S.write(good_table(), tmp_path / "base")
    for argv in ([f"baseline={tmp_path / 'base'}", f"candidate={folder}"],
                 [f"baseline={folder}", f"candidate={tmp_path / 'base'}"],
                 [f"baseline={'a' * 40}", f"results={folder}"]):
        assert regress.main(argv) == 2
        captured = capsys.readouterr()
        line = one_line(captured.err)
        assert str(path) in line and words in line


def test_merge_refuses_by_default_and_skips_loudly_when_told(bad, tmp_path, capsys):
    folder, path, words = bad
    out = tmp_path / "merged.parquet"
    assert merge.main([str(folder), f"out={out}"]) == 2
    line = one_line(capsys.readouterr().err)
    assert str(path) in line and words in line and not out.exists()
    assert merge.main([str(folder), f"out={out}", "strict=false"]) == 0
    captured = capsys.readouterr()
    assert str(path) in one_line(captured.err)
    assert "1 not result tables, skipped" in captured.out
    assert len(pd.read_parquet(out)) == len(good_table())


def test_plots_skip_it_with_a_warning(tmp_path, capsys):
    from plots import memory

    folder = tmp_path / "results"
    S.write(good_table(), folder, per_row=True)
    _csv(folder / "bad.parquet")
    assert memory.main([f"results={folder}", f"out={tmp_path / 'plots'}"]) == 0
    err = capsys.readouterr().err
    assert "warning: skipped" in err and "bad.parquet" in err and "Traceback" not in err


def test_regress_never_exits_1_on_a_reader_failure(tmp_path, capsys, monkeypatch):
    """An unexpected error inside the comparison is exit 2 with one line, never a traceback (exit 1)."""
    S.write(good_table(), tmp_path / "base")
    monkeypatch.setattr(regress, "compare", lambda *a, **k: (_ for _ in ()).throw(KeyError("tflops_p20")))
    assert regress.main([f"baseline={tmp_path / 'base'}", f"candidate={tmp_path / 'base'}"]) == 2
    assert "cannot compare these tables: KeyError" in one_line(capsys.readouterr().err)


@pytest.mark.slow  # a subprocess (~9 s on the GPU machine); CI runs it, the fast GPU tier does not
def test_regress_command_line_on_a_corrupt_table(tmp_path):
    """The real entry point: exit status 2, one line on stderr naming the file, no traceback."""
    S.write(good_table(), tmp_path / "base")
    _truncated(tmp_path / "cand.parquet")
    run = subprocess.run([sys.executable, "-m", "runners.regress", f"baseline={tmp_path / 'base'}",
                          f"candidate={tmp_path / 'cand.parquet'}"], cwd=env.REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2
    assert "cand.parquet" in one_line(run.stderr)


def test_permission_denied_is_named_even_as_root(tmp_path, monkeypatch):
    """chmod 000 cannot block root: the reader's PermissionError is simulated."""
    import pyarrow.parquet as pq

    path = tmp_path / "locked.parquet"
    good_table().to_parquet(path, index=False)
    real = pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda p, *a, **k: (_ for _ in ()).throw(PermissionError(13, "denied"))
                        if str(p) == str(path) else real(p, *a, **k))
    with pytest.raises(results.TableError) as info:
        results.load(tmp_path)
    assert one_line(str(info.value)) == f"{path}: permission denied"
