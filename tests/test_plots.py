"""plots/ on fabricated tables (plots._synthetic): every command writes valid PNGs, and nothing that is not a
correct result is ever drawn or ranked as one. In-process calls of main(); the figures are inspected through
a wrapped plots.common.save."""
import re

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from plots import _synthetic as S
from runners import tables as T
from plots import compare, cross_gpu, heatmap, memory, report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
GPU_A, GPU_B = "FAKE-GPU-A 80GB", "FAKE-GPU-B 141GB"
SEQS = (512, 2048, 8192)


def assert_png(path):
    assert path.is_file(), path
    assert path.read_bytes()[:8] == PNG_MAGIC, path
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200, image.shape


@pytest.fixture(scope="module")
def tables():
    a = S.table(seqs=SEQS, gpu_name=GPU_A)
    b = S.table(seqs=SEQS, gpu_name=GPU_B, speed=1.3, failures=False)
    blocks = S.block_sweep(seqs=(2048,), gpu_name=GPU_A)
    return a, b, blocks


@pytest.fixture(scope="module")
def results(tmp_path_factory, tables):
    """The runner's layout: <dir>/<gpu>/<sweep>/<one file per point>.parquet."""
    root = tmp_path_factory.mktemp("results")
    a, b, blocks = tables
    S.write(a, root / "fake-gpu-a" / "compare", per_row=True)
    S.write(b, root / "fake-gpu-b" / "compare")
    S.write(blocks, root / "fake-gpu-a" / "blocks")
    return root


def test_load_reads_the_runner_layout_recursively(results, tables):
    df = T.load(results)
    assert len(df) == sum(map(len, tables))
    assert set(df[T.GPU]) == {GPU_A, GPU_B}
    assert df.index.is_unique


def test_compare_writes_one_png_per_gpu_and_svg_on_request(results, tmp_path):
    assert compare.main([f"results={results}", f"out={tmp_path}", "svg=true"]) == 0
    pngs = sorted(tmp_path.glob("compare_*.png"))
    assert [p.name for p in pngs] == ["compare_fake-gpu-a-80gb_bf16.png", "compare_fake-gpu-b-141gb_bf16.png"]
    for p in pngs:
        assert_png(p)
        assert "<svg" in p.with_suffix(".svg").read_text()[:2000]


def test_compare_gpu_filter_and_errors(results, tmp_path, capsys):
    assert compare.main([f"results={results}", f"out={tmp_path}", "gpu=gpu-b"]) == 0
    assert [p.name for p in tmp_path.glob("*.png")] == ["compare_fake-gpu-b-141gb_bf16.png"]
    assert compare.main([f"results={results}", f"out={tmp_path}", "gpu=mi300"]) == 2
    assert compare.main([f"results={results}", "dtype=fp8"]) == 2
    assert compare.main([f"results={tmp_path / 'nothing-here'}"]) == 2
    assert compare.main(["out=x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("error: ") for line in err)
    assert "gpu='mi300' matches none of" in err[0]


def _lines(fig, title):
    ax = next(a for a in fig.axes if a.get_title().split("\n")[0] == title)
    return ax, {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}


def test_compare_draws_wrong_and_failed_points_only_as_markers(results, tmp_path, figures):
    assert compare.main([f"results={results}", f"out={tmp_path}", "gpu=gpu-a"]) == 0
    (stem, fig), = figures
    # The fabricated table has atomic wrong at N8192 D128 causal *with* a TFLOPS value, and fused oom at
    # N8192 D64 non-causal: neither may be a point of a line.
    ax, lines = _lines(fig, "head_dim=128, causal")
    assert list(lines["atomic"].get_xdata()) == [512, 2048]
    assert list(lines["two_pass"].get_xdata()) == list(SEQS)
    markers = [line for line in ax.get_lines() if line.get_marker() == "X"]
    assert [(m.get_markeredgecolor(), list(m.get_xdata())) for m in markers] == [("red", [8192])]
    ax, lines = _lines(fig, "head_dim=64, non-causal")
    assert list(lines["fused"].get_xdata()) == [512, 2048]
    assert [m.get_markeredgecolor() for m in ax.get_lines() if m.get_marker() == "X"] == ["dimgray"]
    # peak line at the table's peak_tflops, log2 x axis, title names GPU, dtype and the FLOP convention
    assert any(list(line.get_ydata()) == [1000.0, 1000.0] for line in ax.get_lines())
    assert ax.get_xscale() == "log"
    title = fig._suptitle.get_text()
    assert GPU_A in title and "bf16" in title and T.FLOP_CONVENTION in title


def test_compare_plots_the_median_of_the_fastest_correct_config(results, tmp_path, figures, tables):
    assert compare.main([f"results={results}", f"out={tmp_path}", "gpu=gpu-a"]) == 0
    _, lines = _lines(figures[0][1], "head_dim=128, non-causal")
    a, _, blocks = tables
    rows = pd.concat([a, blocks])
    ok = rows[(rows["variant"] == "two_pass") & (rows["seq"] == 2048) & (rows["head_dim"] == 128) & ~rows["causal"]
              & (rows["status"] == "ok") & rows["correct"]]
    wrong = blocks[(blocks["variant"] == "two_pass") & (blocks["status"] == "wrong")]
    assert wrong["tflops"].max() > 0  # the wrong configs carry numbers; they must not win
    y = dict(zip(lines["two_pass"].get_xdata(), lines["two_pass"].get_ydata()))
    assert y[2048] == pytest.approx(ok["tflops"].max())


def test_untimed_tables_are_drawn_with_a_warning(tmp_path, figures):
    cpu = S.table(seqs=(64, 128), head_dims=(16,), device="cpu-interpreter", gpu_name="cpu-interpreter",
                  timing_meaningful=False, failures=False)
    S.write(cpu, tmp_path / "cpu")
    assert compare.main([f"results={tmp_path / 'cpu'}", f"out={tmp_path}"]) == 0
    assert "TIMINGS NOT MEANINGFUL" in figures[0][1]._suptitle.get_text()
    assert_png(tmp_path / "compare_cpu-interpreter_bf16.png")


def test_heatmap_writes_one_png_per_swept_variant(results, tmp_path):
    assert heatmap.main([f"results={results}", f"out={tmp_path}"]) == 0
    names = sorted(p.name for p in tmp_path.glob("*.png"))
    assert names == ["heatmap_atomic_fake-gpu-a-80gb_bf16.png", "heatmap_two_pass_fake-gpu-a-80gb_bf16.png"]
    for name in names:
        assert_png(tmp_path / name)


def test_heatmap_cells_are_best_correct_tflops_and_failures_are_not_coloured(results, tmp_path, figures, tables):
    assert heatmap.main([f"results={results}", f"out={tmp_path}", "variant=atomic"]) == 0
    (_, fig), = figures
    image = fig.axes[0].get_images()[0].get_array()  # rows: BLOCK_M 32, 64, 128; columns: BLOCK_N 32, 64, 128
    blocks = tables[2]
    atomic = blocks[blocks["variant"] == "atomic"]
    assert image.mask[2, 2]  # 128 × 128: every config "resources" -> no colour
    cell = atomic[(atomic["BLOCK_M"] == 32) & (atomic["BLOCK_N"] == 128)]
    best_correct = cell[(cell["status"] == "ok") & cell["correct"]]["tflops"].max()
    assert cell["tflops"].max() > best_correct  # the wrong config in this cell was "faster"
    assert image[0, 2] == pytest.approx(best_correct)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "resources" in texts and "!" in texts  # the failed cell is labelled; the wrong config flagged
    frames = [p for p in fig.axes[0].patches if not p.get_fill() and p.get_linewidth() == 3]
    ok = atomic[(atomic["status"] == "ok") & atomic["correct"]]
    best = ok.loc[ok["tflops"].idxmax()]
    m, n = [32, 64, 128].index(best["BLOCK_M"]), [32, 64, 128].index(best["BLOCK_N"])
    assert len(frames) == 1 and frames[0].get_xy() == (n - 0.5, m - 0.5)


def test_heatmap_without_a_block_sweep_is_an_error(tmp_path, capsys):
    S.write(S.table(seqs=SEQS), tmp_path / "plain")
    assert heatmap.main([f"results={tmp_path / 'plain'}", f"out={tmp_path}"]) == 2
    assert "no block sweep" in capsys.readouterr().err


def test_configs_differing_off_the_axis_pair_are_no_heatmap(tmp_path, capsys):
    """Two configs at one BLOCK_M x BLOCK_N cell (only num_warps differs) would be a 1x1 'heatmap': none is drawn."""
    one_cell = S.table(seqs=SEQS)
    one_cell = one_cell[one_cell["variant"] == "atomic"].assign(BLOCK_M=64, BLOCK_N=128, num_warps=4)
    other = one_cell.assign(num_warps=8, config_key=one_cell["config_key"] + "|w8", tflops=one_cell["tflops"] * 0.9)
    S.write(pd.concat([one_cell, other], ignore_index=True), tmp_path / "one_cell")
    assert heatmap.main([f"results={tmp_path / 'one_cell'}", f"out={tmp_path}"]) == 2
    assert "no block sweep" in capsys.readouterr().err


def test_memory_writes_png_and_skips_failed_points(results, tmp_path, figures):
    assert memory.main([f"results={results}", f"out={tmp_path}", "gpu=gpu-a"]) == 0
    assert_png(tmp_path / "memory_fake-gpu-a-80gb_bf16.png")
    _, lines = _lines(figures[0][1], "head_dim=64, non-causal")
    assert list(lines["fused"].get_xdata()) == [512, 2048]  # the oom point is not a memory value
    assert figures[0][1].axes[0].get_yscale() == "log"


def test_cross_gpu_writes_png_and_compares_shared_shapes(results, tmp_path):
    assert cross_gpu.main([f"results={results}", f"out={tmp_path}"]) == 0
    assert_png(tmp_path / "cross_gpu_bf16.png")
    summary = cross_gpu.summary(T.load(results))
    both = summary.pivot(index="variant", columns="gpu", values="tflops")
    # GPU B is fabricated 1.3× faster at every shape; block-sweep configs only exist on A and must not count
    # (two_pass/atomic would be faster on A at N2048 D128 through tuned blocks), so the ratio is 1.3 only if
    # each GPU's fastest correct config per shared shape is used.
    ratio = both[GPU_B] / both[GPU_A]
    assert ratio["sdpa_flash"] == pytest.approx(1.3)
    assert ratio["fused"] == pytest.approx(1.3)  # fused: only the shapes correct on both GPUs (oom on A left out)
    assert set(summary["shapes"][summary["variant"] == "atomic"]) == {11}  # 12 shapes, one wrong on A and B
    pct = summary.set_index(["variant", "gpu"])["pct_peak"]
    assert pct[("sdpa_flash", GPU_A)] == pytest.approx(both.loc["sdpa_flash", GPU_A] / 1000 * 100)


def test_report_writes_markdown_with_embedded_pngs(results, tmp_path, tables):
    assert report.main([f"results={results}", f"out={tmp_path}"]) == 0
    text = (tmp_path / "report.md").read_text()
    for needle in (GPU_A, GPU_B, "2.x-fake", "3.x-fake", "aaaaaaaaaa", T.FLOP_CONVENTION,
                   "## Best variant per shape", "**Wrong gradients**"):
        assert needle in text, needle
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert {"compare_fake-gpu-a-80gb_bf16.png", "memory_fake-gpu-a-80gb_bf16.png", "cross_gpu_bf16.png",
            "heatmap_atomic_fake-gpu-a-80gb_bf16.png"} <= set(images)
    for name in images:
        assert "/" not in name  # relative to report.md
        assert_png(tmp_path / name)


def test_report_best_table_ranks_only_correct_rows_and_ratios_to_fa2_cudnn():
    rows = S.table(seqs=(1024,), head_dims=(64,), causals=(False,), failures=False)
    cheat = rows["variant"] == "atomic"
    rows.loc[cheat, "tflops"] = 5000.0  # a wrong point with a huge number ...
    rows.loc[cheat, "status"], rows.loc[cheat, "correct"] = "wrong", False
    table = report.best_table(T.normalize(rows)).iloc[0]
    tf = rows.set_index("variant")["tflops"]
    assert table["best"] == f"sdpa_cudnn {tf['sdpa_cudnn']:.1f}"  # ... is never the best
    assert table["best Triton"] == f"fused {tf['fused']:.1f}"
    assert table["Triton ×FA2"] == f"{tf['fused'] / tf['sdpa_flash']:.2f}"
    assert table["Triton ×cuDNN"] == f"{tf['fused'] / tf['sdpa_cudnn']:.2f}"


def test_report_best_table_ratios_to_fa4_only_where_fa4_has_a_result():
    """×FA4 columns stand next to ×FA2 / ×cuDNN: '-' in tables without fa4 rows, the ratio where fa4 has one."""
    rows = S.table(seqs=(1024,), head_dims=(64,), causals=(False,), failures=False)
    without = report.best_table(T.normalize(rows)).iloc[0]
    assert [c for c in without.index if "×" in c] == ["best ×FA2", "best ×cuDNN", "best ×FA4", "Triton ×FA2",
                                                      "Triton ×cuDNN", "Triton ×FA4"]
    assert without["best ×FA4"] == without["Triton ×FA4"] == without["FA4"] == "-"
    fa4 = rows[rows["variant"] == "sdpa_cudnn"].assign(variant="fa4", tflops=400.0)
    table = report.best_table(T.normalize(pd.concat([rows, fa4], ignore_index=True))).iloc[0]
    tf = rows.set_index("variant")["tflops"]
    assert table["FA4"] == "400.0" and table["best"] == "fa4 400.0" and table["best ×FA4"] == "1.00"
    assert table["Triton ×FA4"] == f"{tf['fused'] / 400.0:.2f}"
    assert table["Triton ×FA2"] == f"{tf['fused'] / tf['sdpa_flash']:.2f}"  # the other ratios as before


@pytest.mark.parametrize("design", ["atomic_tma", "atomic_tma+deterministic", "atomic+deterministic"])
def test_report_best_triton_counts_every_design_and_mode(design):
    rows = S.table(seqs=(1024,), head_dims=(64,), causals=(False,), failures=False)
    fastest = rows[rows["variant"] == "two_pass"].assign(variant=design, tflops=rows["tflops"].max() + 1.0)
    table = report.best_table(T.normalize(pd.concat([rows, fastest], ignore_index=True))).iloc[0]
    assert table["best Triton"] == f"{design} {rows['tflops'].max() + 1.0:.1f}"


def test_every_registered_triton_design_is_a_triton_variant_of_the_tables():
    import variants
    from variants.base import TritonVariant
    designs = {name for name in variants.names() if isinstance(variants.get(name), TritonVariant)}
    assert designs and designs <= set(T.TRITON_VARIANTS)
    assert not any(T.is_triton(name) for name in T.BASELINE_VARIANTS)


def test_report_with_baseline_lists_regressions(tmp_path, tables):
    a = tables[0][tables[0]["status"] == "ok"]
    slow = a.copy()
    sel = (slow["variant"] == "two_pass") & (slow["seq"] == 8192)
    for col in ("tflops", "tflops_p20", "tflops_p80"):
        slow.loc[sel, col] *= 0.7
    S.write(a, tmp_path / "base")
    S.write(slow, tmp_path / "cand")
    assert report.main([f"results={tmp_path / 'cand'}", f"out={tmp_path / 'out'}",
                        f"baseline={tmp_path / 'base'}"]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    assert "## Regressions" in text and "REGRESSED: 4 point(s)" in text
    assert text.count("| SLOWER | two_pass |") == 4


def test_parse_args_types_and_unknown_keys():
    args = T.parse_args(["svg=true", "--gpu=h100", "out=x"], {"svg": False, "gpu": None, "out": "o"}, "p", "")
    assert args == {"svg": True, "gpu": "h100", "out": "x"}
    with pytest.raises(T.UsageError, match="unknown key 'colour'"):
        T.parse_args(["colour=red"], {"svg": False}, "p", "")
    with pytest.raises(T.UsageError, match="expected true or false"):
        T.parse_args(["svg=maybe"], {"svg": False}, "p", "")


def test_is_result_needs_ok_and_correct():
    df = T.normalize(pd.DataFrame({"status": ["ok", "ok", "wrong", "oom", "ok"],
                                   "correct": [True, False, False, None, np.nan]}))
    assert list(T.is_result(df)) == [True, False, False, False, False]
    assert list(T.is_wrong(df)) == [False, True, True, False, True]


def test_every_series_has_a_colour_and_line_style_of_its_own():
    """The series a figure can draw (every registered design and baseline, and each design's modes, listed from the
    registry) never share both colour and line style; a mode keeps its design's colour; the colours of wrong and
    failure markers and of the peak line are no series' colour."""
    from plots import common as C
    series = C.plot_series()
    assert {"two_pass", "ws", "ws+deterministic", "atomic+deterministic", "atomic_tma+deterministic", "fa4",
            "sdpa_cudnn", "reference"} <= set(series)
    looks = {}
    for name in series:
        style = C.variant_style(name)
        looks.setdefault((style["color"], style["linestyle"]), []).append(name)
    assert {k: v for k, v in looks.items() if len(v) > 1} == {}
    bases = {T.base_variant(s) for s in series}
    assert len({C.variant_color(b) for b in bases}) == len(bases)  # one colour per design / baseline
    for name in series:
        assert C.variant_color(name) == C.variant_color(T.base_variant(name))
        assert C.variant_color(name) not in {"red", "tab:red", "black", "dimgray"}


def _mixed_shapes():
    """FABRICATED rows at head_dim 128, non-causal: FlashAttention's grid (16k tokens: B16 N1k, B4 N4k, B2 N8k,
    B1 N16k), a B=2 sweep over N 1k, 2k, 8k (B2 N8k is a point of both), and lone shapes at other batch sizes
    (B13 N3k, B29 N13k) that a line over every shape would zig-zag through."""
    shapes = [(16, 1024), (4, 4096), (1, 16384), (2, 1024), (2, 2048), (2, 8192), (13, 3072), (29, 13312)]
    rows = [S.row(v, seq, 128, False, batch=b) for b, seq in shapes for v in ("two_pass", "sdpa_flash")]
    return T.normalize(pd.DataFrame(rows))


@pytest.mark.parametrize("module", [compare, memory], ids=["compare", "memory"])
@pytest.mark.parametrize("batch, family, seqs, left_out", [
    (None, "B·Nq=16k tokens, H=16", [1024, 4096, 8192, 16384], 4),
    (2, "B=2, H=16", [1024, 2048, 8192], 0)], ids=["grid", "batch2"])
def test_a_line_never_joins_two_shapes(module, batch, family, seqs, left_out, tmp_path, figures):
    """compare and memory draw one shape family per panel (the fixed dims: B, or the tokens B·Nq, and H), the one
    with the most sequence lengths: every line holds that family's points only, the panel title names it, and the
    other shapes are counted in the title; batch= picks the B=2 sweep instead."""
    assert module.draw(_mixed_shapes(), tmp_path, batch=batch)
    (_, fig), = figures
    (ax,) = [a for a in fig.axes if a.get_title().startswith("head_dim=128")]
    assert ax.get_title().split("\n")[1].startswith(family)
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert {line.get_label() for line in lines} == {"two_pass", "sdpa_flash (FA2)"}
    for line in lines:
        assert list(line.get_xdata()) == seqs
    assert (f"{left_out} other shape(s) left out" in fig._suptitle.get_text()) == bool(left_out)
