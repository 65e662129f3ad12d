"""plots/ on tables with nothing to draw (issue 29): only skipped / unsupported / wrong rows, or a dtype whose rows
are all skipped. Every figure command says so in one ``error:`` line on stderr and exits 2 (docs/plots.md), writes
no file and leaves no folder behind; the report still writes a whole report.md (exit 0) that names what it left
out, and never a half-written folder."""
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from plots import _synthetic as S
from plots import compare, cross_gpu, heatmap, memory, report, resources, study, varlen

FIGURE_COMMANDS = {"compare": compare, "memory": memory, "heatmap": heatmap, "cross_gpu": cross_gpu,
                   "resources": resources, "varlen": varlen, "study": study}
TIMING = ("ms", "ms_p20", "ms_p80", "tflops", "tflops_p20", "tflops_p80", "executed_tflops", "pct_peak",
          "peak_mem_bytes", "workspace_bytes")


def cpu_rows(status: str, *, dtype: str = "bf16", block_sweep: bool = False) -> pd.DataFrame:
    """CPU-interpreter rows (as the README's commands write them), every one with ``status``."""
    kwargs = {"gpu_name": "", "device": "cpu-interpreter", "timing_meaningful": False, "dtype": dtype}
    if block_sweep:
        df = S.block_sweep(seqs=(256,), **kwargs)
    else:
        df = S.table(seqs=(256, 512), head_dims=(64,), variants=("two_pass", "atomic"), failures=False, **kwargs)
    df = df.copy()
    df["status"] = status
    df["correct"] = False
    df["reason"] = f"fabricated {status}"
    if status != "wrong":
        for col in TIMING:
            df[col] = np.nan
    return df


def one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("warning: skipped")]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("status", ["skipped", "unsupported"])
@pytest.mark.parametrize("name", sorted(FIGURE_COMMANDS))
def test_figure_commands_on_rows_that_never_ran_exit_2_in_one_line(name, status, tmp_path, capsys):
    folder = S.write(pd.concat([cpu_rows(status), cpu_rows(status, block_sweep=True)]), tmp_path / "results")
    out = tmp_path / "out"
    assert FIGURE_COMMANDS[name].main([f"results={folder}", f"out={out}"]) == 2
    one_error_line(capsys.readouterr().err)
    assert not out.exists()


def test_compare_names_the_statuses_and_the_dtypes_that_have_something_to_draw(tmp_path, capsys):
    folder = S.write(pd.concat([cpu_rows("skipped"), S.table(seqs=(256, 512), head_dims=(64,), failures=False,
                                                              dtype="fp16", device="cpu-interpreter", gpu_name="",
                                                              timing_meaningful=False)]), tmp_path / "results")
    out = tmp_path / "out"
    assert compare.main([f"results={folder}", f"out={out}"]) == 2  # default dtype=bf16: all skipped
    line = one_error_line(capsys.readouterr().err)
    assert "bf16" in line and "skipped" in line and "dtype=fp16" in line, line
    assert not out.exists()
    assert compare.main([f"results={folder}", f"out={out}", "dtype=fp16"]) == 0
    assert [p.name for p in out.glob("*.png")] == ["compare_cpu-interpreter_fp16.png"]


def test_memory_on_a_dtype_without_drawable_rows_exits_2(tmp_path, capsys):
    folder = S.write(pd.concat([cpu_rows("unsupported"), cpu_rows("ok", dtype="fp16")]), tmp_path / "results")
    assert memory.main([f"results={folder}", f"out={tmp_path / 'out'}"]) == 2
    one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_compare_with_only_wrong_rows_draws_them_as_markers(tmp_path, capsys):
    folder = S.write(cpu_rows("wrong"), tmp_path / "results")
    assert compare.main([f"results={folder}", f"out={tmp_path / 'out'}"]) == 0
    assert len(list((tmp_path / "out").glob("compare_*.png"))) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_compare_with_results_that_carry_no_tflops_draws_nothing_in_one_line(tmp_path, capsys):
    df = cpu_rows("ok")
    df["correct"] = True  # correct, but no throughput to draw
    folder = S.write(df, tmp_path / "results")
    assert compare.main([f"results={folder}", f"out={tmp_path / 'out'}"]) == 2
    one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize("status", ["skipped", "unsupported", "wrong"])
def test_report_on_rows_without_results_is_whole_and_says_what_it_left_out(status, tmp_path, capsys):
    folder = S.write(cpu_rows(status), tmp_path / "results")
    out = tmp_path / "report"
    assert report.main([f"results={folder}", f"out={out}"]) == 0
    cap = capsys.readouterr()
    assert "Traceback" not in cap.err
    text = (out / "report.md").read_text()
    assert "## Left out" in text and status in text
    assert [p.name for p in out.iterdir() if p.suffix != ".png"] == ["report.md"]


def test_report_on_the_readme_rows_draws_the_fp16_point_and_names_the_skipped_bf16_one(tmp_path, capsys):
    rows = pd.concat([cpu_rows("skipped").iloc[:1], cpu_rows("ok", dtype="fp16").assign(correct=True)])
    rows["tflops"] = rows["tflops"].where(rows["dtype"] != "fp16", 0.01)
    folder = S.write(rows, tmp_path / "results")
    out = tmp_path / "report"
    assert report.main([f"results={folder}", f"out={out}"]) == 0
    text = (out / "report.md").read_text()
    assert "compare_cpu-interpreter_fp16.png" in text
    assert "fabricated skipped" in text  # the skipped row's reason is in the report


def test_report_that_fails_midway_leaves_no_folder(tmp_path, monkeypatch):
    folder = S.write(cpu_rows("ok", dtype="fp16").assign(correct=True, tflops=0.01), tmp_path / "results")

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(report, "environments", boom)
    out = tmp_path / "report"
    with pytest.raises(RuntimeError):
        report.main([f"results={folder}", f"out={out}"])
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [tmp_path / "results"]  # no temporary folder either


def test_the_readme_rows_through_the_command_line(tmp_path):
    """The issue's reproduction: the headline point's bf16 skipped row, then the compare command."""
    folder = S.write(cpu_rows("skipped").iloc[:1], tmp_path / "results")
    run = subprocess.run([sys.executable, "-m", "plots.compare", f"results={folder}", f"out={tmp_path / 'out'}"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr
    assert "ValueError" not in run.stderr
    one_error_line(run.stderr)
    assert not (tmp_path / "out").exists()


def test_report_names_the_files_it_could_not_read_and_the_points_that_never_ran(tmp_path, capsys):
    folder = tmp_path / "results"
    good = cpu_rows("ok", dtype="fp16").assign(correct=True, tflops=0.01)
    S.write(pd.concat([good, cpu_rows("unsupported").iloc[:2]]), folder, per_row=True)
    (folder / "notes.parquet").write_text("a CSV renamed .parquet\n1,2\n")
    out = tmp_path / "report"
    assert report.main([f"results={folder}", f"out={out}"]) == 0
    assert "notes.parquet" in capsys.readouterr().err  # still warned about on stderr
    text = (out / "report.md").read_text()
    left = text[text.index("## Left out"):text.index("## Resources")]
    assert "1 file(s) not read" in left and "notes.parquet" in left, left
    assert "2 point(s) not run" in left and "2 unsupported" in left and "fabricated unsupported" in left, left


def test_report_lists_a_correct_result_without_tflops_under_left_out(tmp_path):
    """An ok, correct row whose tflops is NaN is not ranked, and Left out names it and why (never 'Nothing')."""
    rows = S.table(seqs=(512, 1024), head_dims=(64,), variants=("two_pass", "sdpa_flash"), failures=False)
    gap = (rows["variant"] == "two_pass") & (rows["seq"] == 1024) & ~rows["causal"].astype(bool)
    folder = S.write(rows.assign(tflops=rows["tflops"].where(~gap, np.nan)), tmp_path / "results")
    assert report.main([f"results={folder}", f"out={tmp_path / 'report'}"]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    left = text[text.index("## Left out"):text.index("## Resources")]
    assert "Nothing" not in left and "1 correct result(s) without TFLOPS" in left, left
    assert "two_pass" in left and "N1024" in left and "tflops is NaN" in left, left


def test_report_never_counts_a_row_of_a_clashing_column_type_as_correct(tmp_path, capsys):
    """A file whose `seq` is text that is not a number, where the other files' is int64: its ok, correct row is
    not a result; the file is named as not read."""
    rows = S.table(seqs=(512, 1024), head_dims=(64,), variants=("two_pass",), failures=False)
    folder = tmp_path / "results"
    folder.mkdir()
    rows.iloc[1:].to_parquet(folder / "a.parquet", index=False)
    rows.iloc[:1].assign(seq="n/a").to_parquet(folder / "b.parquet", index=False)
    assert report.main([f"results={folder}", f"out={tmp_path / 'report'}"]) == 0
    assert "Traceback" not in capsys.readouterr().err
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"{len(rows) - 1} correct results" in text, text[:400]
    left = text[text.index("## Left out"):text.index("## Resources")]
    assert "1 file(s) not read" in left and "b.parquet" in left and "column 'seq'" in left, left


def test_report_with_nothing_left_out_says_so(tmp_path):
    gpu_rows = S.table(seqs=(512,), head_dims=(64,), variants=("two_pass", "sdpa_flash"), failures=False)
    folder = S.write(gpu_rows, tmp_path / "results")
    assert report.main([f"results={folder}", f"out={tmp_path / 'report'}"]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "Nothing: every file was read and every point ran." in text
    cpu = S.write(cpu_rows("ok", dtype="fp16").assign(correct=True, tflops=0.01), tmp_path / "cpu")
    assert report.main([f"results={cpu}", f"out={tmp_path / 'cpu-report'}"]) == 0
    assert "timings that are not meaningful" in (tmp_path / "cpu-report" / "report.md").read_text()
