"""Peak memory vs sequence length, one line per variant, faceted by head dim × causal; one figure per GPU.

    python -m plots.memory results=<dir or file> [gpu=<substring>] [dtype=bf16] [out=plots/out] [svg=true]
                           [batch=<int>] [heads=<int>]

Solid/dashed lines: ``peak_mem_bytes`` of the backward (the config the compare plot draws: the fastest
correct block config per point). Dotted lines of the same colour: ``workspace_bytes`` (extra buffers the
design allocates, e.g. atomic's fp32 dQ accumulator), drawn where nonzero. X markers on the x axis: oom
(grey) and other failures, wrong gradients in red — never drawn as results.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from plots import common as C
from runners import tables as T
from plots.compare import draw_failures, pick_family

PROG = "plots.memory"
DEFAULTS = {"results": None, "gpu": None, "dtype": "bf16", "out": "plots/out", "svg": False, "batch": None,
            "heads": None}


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    df = T.load(T.require(args, "results", PROG))
    paths = draw(df, args["out"], gpu=args["gpu"], dtype=args["dtype"], svg=args["svg"], batch=args["batch"],
                 heads=args["heads"])
    return C.print_paths(paths, f"{PROG}: no correct row with peak_mem_bytes in the tables")


def draw(df: pd.DataFrame, out: str | Path, *, gpu: str | None = None, dtype: str | None = "bf16",
         svg: bool = False, batch=None, heads=None) -> list[Path]:
    df = T.select_shape(T.select_dtype(C.kernel_only(df, PROG), dtype, PROG), batch, heads)
    paths = []
    for label in T.select_gpus(df, gpu, PROG) if len(df) else []:
        rows = T.latest(df[df[T.GPU] == label])
        if not (T.is_result(rows) & rows["peak_mem_bytes"].notna()).any():
            continue
        paths += _figure(rows, label, dtype, out, svg)
    return paths


def _bytes(value: float, _pos=None) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            return f"{value / scale:g} {unit}" if value / scale >= 10 else f"{value / scale:.3g} {unit}"
    return f"{value:g} B"


def _figure(rows: pd.DataFrame, gpu: str, dtype: str | None, out, svg: bool) -> list[Path]:
    rows, notes = pick_family(rows)
    ranked, _ = T.timed(rows)  # fastest config by meaningful timings when there are any
    results = T.best_config(ranked[T.is_result(ranked)])
    if results.empty:  # untimed: any correct row per point
        results = rows[T.is_result(rows)].drop_duplicates(["variant", *T.SHAPE_COLUMNS])
    results = results[results["peak_mem_bytes"].notna()]
    failed = C.uncovered_failures(rows[T.is_failed(rows)], results)
    variants = T.variant_order(rows["variant"])
    fig, ncols, cells = C.seq_panels(rows, extra_height=1.5)
    any_workspace = False
    for ax, hd, causal, is_bottom, is_left in cells:
        panel = C.in_panel(results, hd, causal)
        for v in variants:
            line = panel[panel["variant"] == v].sort_values("seq")
            if line.empty:
                continue
            style = C.variant_style(v)
            ax.plot(line["seq"], line["peak_mem_bytes"], label=T.variant_label(v), **style)
            ws = line[line["workspace_bytes"] > 0]
            if len(ws):
                any_workspace = True
                ax.plot(ws["seq"], ws["workspace_bytes"], color=style["color"], linestyle=":", linewidth=1.4)
        ax.set_yscale("log", base=2)
        draw_failures(ax, C.in_panel(failed, hd, causal), variants)
        C.finish_seq_panel(ax, C.in_panel(rows, hd, causal), hd, causal, is_bottom, is_left, "peak memory of the backward")
        ax.yaxis.set_major_formatter(FuncFormatter(_bytes))
    handles = [Line2D([], [], label=T.variant_label(v), **C.variant_style(v)) for v in variants
               if (results["variant"] == v).any()]
    if any_workspace:
        handles.append(Line2D([], [], color="black", linestyle=":", label="workspace_bytes (same colour)"))
    handles += C.failure_handles(failed)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 3 if ncols < 3 else 5),
               fontsize=9, frameon=False)
    lines = [f"FlashAttention backward peak memory — {gpu}, {dtype or 'all dtypes'}", C.gpu_title(rows, gpu),
             "config = fastest correct block config per point (as in the TFLOPS plot)", *notes]
    fig.suptitle("\n".join(lines), fontsize=10)
    stem = f"memory_{T.slug(gpu)}_{dtype or 'all'}"
    return C.save(fig, out, stem, svg)


if __name__ == "__main__":
    raise SystemExit(main())
