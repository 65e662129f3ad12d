"""plots.step_time and the report's "Step time by design" section on FABRICATED model-step rows
(plots._synthetic.step_table): bars only for correct rows, a wrong (off the loss curve) or failed design as a marker,
and model-step rows never drawn or ranked by the kernel figures and sections of the same tables."""
import matplotlib.image as mpimg
import pandas as pd
import pytest

from plots import _synthetic as S
from runners import tables as T
from plots import compare, cross_gpu, heatmap, memory, report, resources, step_time, varlen

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
KERNEL_FIGURES = {"compare": compare, "memory": memory, "heatmap": heatmap, "cross_gpu": cross_gpu,
                  "resources": resources, "varlen": varlen}


def assert_png(path):
    assert path.is_file() and path.read_bytes()[:8] == PNG_MAGIC, path
    assert mpimg.imread(path).shape[0] > 200


@pytest.fixture
def mixed(tmp_path):
    """Kernel rows and model-step rows in one results folder, as runners.sweep and runners.model_step write them."""
    root = tmp_path / "results"
    S.write(S.table(seqs=(1024, 4096)), root / "fake-gpu-a" / "compare", per_row=True)
    S.write(S.step_table(), root / "fake-gpu-a" / "model_step", per_row=True)
    return root


def test_step_time_draws_a_bar_per_correct_row_and_never_a_wrong_one(tmp_path, figures, capsys):
    rows = S.step_table()
    folder = S.write(rows, tmp_path / "in")
    assert step_time.main([f"results={folder}", f"out={tmp_path / 'out'}"]) == 0
    path = tmp_path / "out" / "step_time_fake-gpu-a-80gb.png"
    assert capsys.readouterr().out.strip() == str(path)
    assert_png(path)
    (stem, fig), = figures
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["gpt_d64: L2 d256 H4/4 D64 B2 N4096 bf16 causal",
                                                 "gpt_d128: L2 d512 H4/4 D128 B2 N4096 bf16 causal"]
    heights = [round(p.get_height(), 6) for ax in panels for p in ax.patches]
    ok = rows[rows["status"] == "ok"]
    assert len(heights) == 2 * len(ok)  # the step bar and its attention-backward part, per correct row
    for _, r in ok.iterrows():
        assert round(r["ms"], 6) in heights and round(r["attn_bwd_ms"], 6) in heights
    wrong = rows[rows["status"] == "wrong"].iloc[0]
    assert round(wrong["ms"], 6) not in heights  # timed, but off the loss curve: a marker, never a bar
    markers = [line for ax in panels for line in ax.get_lines() if line.get_marker() == "X"]
    assert sorted(line.get_markeredgecolor() for line in markers) == ["dimgray", "red"]  # flex oom, fused wrong
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[:2] == ["eager", "default"] and any("attention backward" in t for t in legend)
    assert "Step time by design" in fig._suptitle.get_text()


def test_step_time_table_columns_and_gate(tmp_path):
    table = step_time.table(T.normalize(S.step_table()))
    assert list(table.columns) == ["GPU", "model", "design", "mode", "step ms [p20–p80]", "×sdpa_flash",
                                   "attn bwd share", "loss dev / spread / tol", "status"]
    fused = table[(table["design"] == "fused") & (table["mode"] == "eager") & table["model"].str.startswith("gpt_d128")]
    assert fused.iloc[0][["step ms [p20–p80]", "×sdpa_flash", "status"]].tolist() == ["-", "-", "wrong"]
    assert fused.iloc[0]["loss dev / spread / tol"] == "0.05 / 0.004 / 0.01"
    flash = table[(table["design"] == "sdpa_flash")]
    assert set(flash["×sdpa_flash"]) == {"1.00"} and set(table["status"]) == {"ok", "wrong", "oom"}


def test_step_time_untimed_rows_say_so(tmp_path, figures):
    rows = S.step_table(gpu_name="", device="cpu-interpreter", timing_meaningful=False, failures=False)
    assert step_time.draw(T.normalize(rows), tmp_path / "out")
    assert "CPU INTERPRETER: TIMINGS NOT MEANINGFUL" in figures[0][1]._suptitle.get_text()


def test_step_time_without_model_step_rows_exits_2_in_one_line(tmp_path, capsys):
    folder = S.write(S.table(seqs=(1024,)), tmp_path / "in")
    assert step_time.main([f"results={folder}", f"out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: plots.step_time: no model-step row")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", sorted(KERNEL_FIGURES))
def test_kernel_figures_on_model_step_rows_only_exit_2_naming_step_time(name, tmp_path, capsys):
    folder = S.write(S.step_table(), tmp_path / "in")
    assert KERNEL_FIGURES[name].main([f"results={folder}", f"out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    if name != "varlen":  # varlen first asks for its own varlen_dist column
        assert "only model-step rows" in err[0] and "plots.step_time" in err[0]


def test_kernel_figures_leave_model_step_rows_out(mixed, tmp_path, figures):
    kernels_only = tmp_path / "kernels"
    S.write(S.table(seqs=(1024, 4096)), kernels_only)
    df, alone = T.load(mixed), T.load(kernels_only)
    for module in (compare, memory):
        module.draw(df, tmp_path / "a")
        module.draw(alone, tmp_path / "b")
    drawn = [[(line.get_label(), tuple(line.get_xdata()), tuple(line.get_ydata())) for ax in fig.axes
              for line in ax.get_lines()] for _, fig in figures]
    assert drawn[0] == drawn[1] and drawn[2] == drawn[3]  # the same lines and markers with or without step rows
    assert resources.section(df) == resources.section(alone)


def test_report_has_the_step_time_section_and_keeps_it_out_of_the_kernel_sections(mixed, tmp_path):
    assert report.main([f"results={mixed}", f"out={tmp_path / 'out'}"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    section = md[md.index("## Step time by design"):md.index("## Plots")]
    assert "![Step time by design — step_time_fake-gpu-a-80gb](step_time_fake-gpu-a-80gb.png)" in section
    assert_png(tmp_path / "out" / "step_time_fake-gpu-a-80gb.png")
    assert "| model | design | mode | step ms [p20–p80] |" in section
    assert "| gpt_d128: L2 d512 H4/4 D128 B2 N4096 bf16 causal | fused | eager | - | - | - | 0.05 / 0.004 / 0.01 | wrong |" \
        in section
    kernel_part = md[:md.index("## Step time by design")]
    assert "gpt_d" not in kernel_part and "compile_mode" not in kernel_part
    assert "bnhd" not in kernel_part  # a model step's attention shape (bnhd) is nowhere (the kernel rows are bhnd)
    assert f"{len(S.step_table())} of the rows are model-step rows" in md


def test_report_of_model_step_rows_only(tmp_path):
    folder = S.write(S.step_table(), tmp_path / "in")
    assert report.main([f"results={folder}", f"out={tmp_path / 'out'}"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    # the kernel sections (best configs, failures, resources, tensor-pipe utilization) each say so
    assert md.count(report.NO_KERNELS.strip()) == 4 and "## Step time by design" in md
    assert "no kernel figures" in md and sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "report.md", "step_time_fake-gpu-a-80gb.png"]


def test_report_regressions_list_model_step_points(tmp_path):
    base = S.write(S.step_table(failures=False), tmp_path / "base")
    cand = S.step_table(failures=False)
    sel = (cand["variant"] == "atomic") & (cand["compile_mode"] == "default") & (cand["model"] == "gpt_d64")
    cand.loc[sel, ["ms", "ms_p20", "ms_p80"]] *= 1.3
    folder = S.write(cand, tmp_path / "cand")
    assert report.main([f"results={folder}", f"out={tmp_path / 'out'}", f"baseline={base}"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    section = md[md.index("## Regressions"):md.index("## Plots")]
    assert "Model-step points" in section and "| SLOWER | atomic | default | gpt_d64" in section
    assert pd.Series([line.startswith("| SLOWER") for line in section.splitlines()]).sum() == 1
