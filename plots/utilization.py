"""Distance to the limit: TFLOPS against the tensor-pipe utilization Nsight Compute read (runners/point/ncu.py columns,
written by sweeps run with bench.ncu=true on a GPU).

    python -m plots.utilization results=<dir or file> [gpu=<substring>] [dtype=bf16] [variant=<name>]
                                [out=plots/out] [svg=true]

One figure per GPU (``utilization_<gpu-slug>_<dtype>.png``), one panel per design: each correct config × shape is a
point at (tensor-pipe % of the backward, TFLOPS), coloured by its DRAM throughput % of peak. The backward's
percentages are its kernels' values weighted by their time under ncu (``ncu_kernel_ms``). The dashed line is
``peak_tflops × pipe % / 100``: a point on it turns every busy tensor-pipe cycle into FLOP-convention TFLOPS at the
dense peak; below it, pipe cycles go to work the FLOP convention does not count (recomputation, masked tiles) or
the pipe runs under its peak rate. ``section(df)`` is the report's table, and says why when no row has the columns.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from plots import common as C
from runners import tables as T

PROG = "plots.utilization"
DEFAULTS = {"results": None, "gpu": None, "dtype": "bf16", "variant": None, "out": "plots/out", "svg": False}
NO_NCU = "no ncu columns in these rows"


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    df = T.load(T.require(args, "results", PROG))
    paths = draw(df, args["out"], gpu=args["gpu"], dtype=args["dtype"], variant=args["variant"], svg=args["svg"])
    return C.print_paths(paths, f"{PROG}: {NO_NCU} ({notes_text(df)}); a sweep with bench.ncu=true on a GPU "
                                "writes them")


# ------------------------------------------------------------------------------------------------ values


def backward_pct(row, column: str) -> float:
    """The backward's % of `column` (ncu_tensor_pct or ncu_dram_pct): its kernels' values weighted by their time
    under ncu; NaN when the row has none."""
    values, weights = C.json_dict(row.get(column)), C.json_dict(row.get("ncu_kernel_ms"))
    pairs = [(v, weights.get(k, 0.0)) for k, v in values.items() if v is not None]
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return math.nan
    return sum(v * w for v, w in pairs) / total


def measured(df: pd.DataFrame) -> pd.DataFrame:
    """Correct, meaningfully timed kernel rows that carry ncu values (newest per config), with `_tensor_pct` and
    `_dram_pct` (the backward's)."""
    rows = T.latest(T.kernel_rows(df))
    rows = rows[rows["timing_meaningful"] & T.is_result(rows) & (rows["ncu_tensor_pct"] != "")]
    rows = rows.assign(_tensor_pct=[backward_pct(r, "ncu_tensor_pct") for _, r in rows.iterrows()],
                       _dram_pct=[backward_pct(r, "ncu_dram_pct") for _, r in rows.iterrows()])
    return rows[rows["_tensor_pct"].notna()]


def notes_text(df: pd.DataFrame) -> str:
    """'ncu_note: bench.ncu=false (off by default ...) × 12; ...' over the kernel rows, or why there is none."""
    notes = T.kernel_rows(df)["ncu_note"] if len(df) else pd.Series(dtype=str)
    notes = notes[notes != ""]
    if notes.empty:
        return "the rows have no ncu_note either: written before runners/point/ncu.py"
    counts = notes.value_counts()
    return "ncu_note: " + "; ".join(f"{note} × {n}" for note, n in counts.head(4).items()) + (
        f"; +{len(counts) - 4} other notes" if len(counts) > 4 else "")


# ----------------------------------------------------------------------------------------------- report
def section(df: pd.DataFrame) -> str:
    """The report's utilization section (Markdown): each design's fastest measured config per shape with its
    backward's tensor-pipe and DRAM %, the top kernel's; or one line saying why there is nothing."""
    rows = measured(df)
    if rows.empty:
        return f"_({NO_NCU}: {notes_text(df)}. A sweep with `bench.ncu=true` on a GPU writes them.)_\n"
    best = T.best_config(rows)
    parts = ["Nsight Compute, one steady backward call per config (`bench.ncu=true`): the tensor pipe's active "
             "cycles and the DRAM throughput as a % of their peak, for the whole backward (kernels weighted by "
             "their time) and for its top kernel; the fastest measured config of each design per shape.\n"]
    for (gpu, dtype), g in best.groupby([T.GPU, "dtype"], sort=True):
        g = g.sort_values(["seq", "head_dim", "causal", "variant"], kind="stable")
        table = pd.DataFrame({
            "variant": g["variant"], "shape": [T.shape_text(r) for _, r in g.iterrows()],
            "TFLOPS": [f"{t:.1f}" for t in g["tflops"]],
            "tensor pipe %": [_pct(v) for v in g["_tensor_pct"]], "DRAM %": [_pct(v) for v in g["_dram_pct"]],
            "top kernel": [r["top_kernel"] or "-" for _, r in g.iterrows()],
            "top kernel tensor / DRAM %": [f"{_pct(a)} / {_pct(b)}" for a, b in
                                           zip(g["top_kernel_tensor_pct"], g["top_kernel_dram_pct"])]})
        parts += [f"### {gpu} — {dtype}\n", T.markdown_table(table)]
    return "\n".join(parts)


def _pct(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.0f}%"


# ----------------------------------------------------------------------------------------------- figures
def draw(df: pd.DataFrame, out: str | Path, *, gpu: str | None = None, dtype: str | None = "bf16",
         variant: str | None = None, svg: bool = False) -> list[Path]:
    """The TFLOPS-vs-tensor-pipe figures of the rows with ncu values; [] when there is none."""
    paths = []
    for label, rows in C.per_gpu(df, PROG, dtype=dtype, gpu=gpu, variant=variant):
        rows = measured(rows)
        if len(rows):
            paths += _figure(rows, label, dtype, out, svg)
    return paths


def _figure(rows: pd.DataFrame, gpu: str, dtype, out, svg) -> list[Path]:
    designs = T.variant_order(rows["variant"])
    cols = min(3, len(designs))
    nrows = math.ceil(len(designs) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.4 * cols + 1.0, 3.9 * nrows), squeeze=False, sharex=True,
                             sharey=True, layout="constrained")
    peak = pd.to_numeric(rows[T.PEAK], errors="coerce").dropna()
    scatter = None
    for ax, design in zip(axes.flat, designs):
        mine = rows[rows["variant"] == design]
        scatter = ax.scatter(mine["_tensor_pct"], mine["tflops"], c=mine["_dram_pct"].fillna(0), cmap="magma_r",
                             vmin=0, vmax=100, s=34, edgecolors="black", linewidths=0.4, zorder=3)
        if len(peak):
            ax.plot([0, 100], [0, float(peak.iloc[0])], ls="--", color="black", lw=0.9, zorder=2,
                    label=f"peak {float(peak.iloc[0]):.0f} × pipe %")
            ax.legend(fontsize=7, loc="upper left")
        ax.set_title(f"{design} ({len(mine)} configs)", fontsize=10)
        ax.set_xlim(0, 100)
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[len(designs):]:
        ax.set_visible(False)
    for ax in axes.flat[:len(designs)]:  # every panel: the last row may be partly empty
        ax.set_xlabel("tensor pipe active, % of peak (backward)")
        ax.tick_params(labelbottom=True)
    for ax in axes[:, 0]:
        ax.set_ylabel("TFLOPS (correct results)")
    if scatter is not None:
        fig.colorbar(scatter, ax=axes.ravel().tolist(), label="DRAM throughput, % of peak (backward)")
    fig.suptitle(f"TFLOPS vs tensor-pipe utilization (Nsight Compute) — {dtype}\n"
                 f"{C.gpu_title(rows, gpu)} · {T.FLOP_CONVENTION}", fontsize=10)
    return C.save(fig, out, f"utilization_{T.slug(gpu)}_{dtype}", svg)


if __name__ == "__main__":
    raise SystemExit(main())
