"""results/ as a record (issue 45): the registry of current tables (runners/tables/current.py), the index it
generates (results/CURRENT.md) and the command a tool asks (python -m runners.current)."""
import pandas as pd
import pytest

from runners import current as R
from runners import docs_numbers as D
from runners.tables import current as C


def test_index_is_up_to_date(capsys):
    assert R.main(["--check"]) == 0, capsys.readouterr().out


def test_every_current_table_exists_under_its_gpu_folder_once():
    seen = {}
    for c in C.CURRENT:
        assert c.paths and c.notes, f"{c.gpu}/{c.study}: no table or no page"
        for path in c.paths:
            assert path.startswith(f"results/{c.gpu}/") and path.endswith(".parquet"), path
            assert (R.REPO / path).is_file(), f"{c.gpu}/{c.study}: no table {path}"
            assert path not in seen, f"{path} is current for both {seen[path]} and {c.study}"
            seen[path] = c.study
        for page in c.notes:
            assert (R.REPO / page).is_file(), f"{c.gpu}/{c.study}: no page {page}"
    assert len({(c.gpu, c.study) for c in C.CURRENT}) == len(C.CURRENT), "a (gpu, study) declared twice"


def test_docs_figures_read_current_tables():
    """Every table (parquet) a README / docs/results.md figure reads is a current one, except the block named
    below."""
    reads_history = {"h200_fa_grid"}  # docs/results.md's line about the H200's first FA grid (issue 5)
    current = {p for c in C.CURRENT for p in c.paths}
    for name, block in D.BLOCKS.items():
        tables = {p for p in block.paths if p.endswith(".parquet")}  # logs (the test tiers) are not tables
        old = tables - current
        assert bool(old) == (name in reads_history), f"block {name} reads tables that are not current: {old}"


def test_the_command_names_the_current_tables(capsys):
    assert R.main(["--gpu", "h100", "--study", "fa_grid"]) == 0
    assert capsys.readouterr().out.split() == list(C.paths("h100", "fa_grid"))
    assert R.main(["--list", "--gpu", "h200"]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert {gpu for gpu, _, _ in rows} == {"h200"} and ["h200", "fa_grid", C.paths("h200", "fa_grid")[0]] in rows


@pytest.mark.parametrize("args", [["--gpu", "h900"], ["--gpu", "h200x2", "--study", "fa_grid"]],
                         ids=["unknown-gpu", "study-not-on-that-gpu"])
def test_an_unknown_gpu_or_study_is_one_line_and_exit_2(args, capsys):
    assert R.main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "known: " in err[0]


def table(path, commit, timestamp):
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"commit": [commit, commit], "timestamp": [f"{timestamp}T01:00:00", f"{timestamp}T02:00:00"],
                  "tflops": [1.0, 2.0]}).to_parquet(path)


def test_index_lists_provenance_and_history_and_goes_stale(tmp_path, monkeypatch, capsys):
    table(tmp_path / "results/h100/new.parquet", "abcdef0123", "2026-11-26")
    table(tmp_path / "results/h100/old.parquet", "1234567890", "2026-11-20")
    (tmp_path / "results/h100/NOTES.md").write_text("notes\n")
    monkeypatch.setattr(C, "CURRENT", (C.Current("h100", "grid", "a grid", ("results/h100/new.parquet",),
                                                 ("results/h100/NOTES.md",)),))
    monkeypatch.setattr(R, "REPO", tmp_path)
    assert R.main(["--write"]) == 0
    text = (tmp_path / R.INDEX).read_text()
    assert ("| `grid` | a grid | [results/h100/new.parquet](h100/new.parquet) | abcdef0 | 2026-11-26 | "
            "[results/h100/NOTES.md](h100/NOTES.md) |") in text
    assert "- [results/h100/old.parquet](h100/old.parquet): 1234567, 2026-11-20" in text  # history, kept in place
    assert R.main(["--check"]) == 0
    table(tmp_path / "results/h100/newer.parquet", "fedcba9876", "2026-11-27")  # a new table, not registered
    assert R.main(["--check"]) == 1
    assert "results/CURRENT.md is stale" in capsys.readouterr().out
