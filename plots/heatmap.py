"""Block-size heatmaps for a ``sweep=blocks`` run: one figure per GPU × variant, one panel per shape.

    python -m plots.heatmap results=<dir or file> [gpu=<substring>] [dtype=bf16] [variant=<name>]
                            [sweep=<sweep_id substring>] [out=plots/out] [svg=true]

Axes are BLOCK_M × BLOCK_N (atomic) or BLOCK_M1 × BLOCK_N1 (two_pass, fused: the dK/dV kernel's blocks).
Each cell's colour and number is the best correct TFLOPS over every other block field (num_warps,
num_stages, the dQ blocks, ...). The best cell has a thick black frame. A hatched grey cell was tried and
never gave a correct result (its label says why: WRONG in red, or oom / resources / compile_error / error);
a blank cell was not tried. A red '!' in a cell means some other config in that cell had wrong gradients.
Only shapes with at least two block configs are drawn.
"""
from __future__ import annotations

import textwrap

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Rectangle

from plots import common as C
from runners import tables as T

PROG = "plots.heatmap"
DEFAULTS = {"results": None, "gpu": None, "dtype": "bf16", "variant": None, "sweep": None, "out": "plots/out",
            "svg": False}
AXIS_PAIRS = (("BLOCK_M", "BLOCK_N"), ("BLOCK_M1", "BLOCK_N1"))
MAX_PANELS = 12
TITLE_CHARS = 52  # a panel title line wider than this runs into the next panel (4.6 in at 8.5 pt)
STATUS_SHORT = {"resources": "resources", "compile_error": "compile\nerror", "oom": "oom", "error": "error",
                "unsupported": "unsup."}


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    df = T.load(T.require(args, "results", PROG))
    paths = draw(df, args["out"], gpu=args["gpu"], dtype=args["dtype"], variant=args["variant"],
                 sweep=args["sweep"], svg=args["svg"])
    return C.print_paths(paths, f"{PROG}: no block sweep found (no shape with two or more tried cells of the block-size pair)")


def axis_pair(rows: pd.DataFrame) -> tuple[str, str] | None:
    for m, n in AXIS_PAIRS:
        if rows[m].notna().any() and rows[n].notna().any():
            return m, n
    return None


def draw(df: pd.DataFrame, out: str | Path, *, gpu: str | None = None, dtype: str | None = "bf16",
         variant: str | None = None, sweep: str | None = None, svg: bool = False) -> list[Path]:
    """All heatmap figures the tables support; an empty list when there is no block sweep."""
    df = T.select_dtype(C.kernel_only(df, PROG), dtype, PROG)
    if sweep:
        df = df[df["sweep_id"].str.contains(sweep, case=False, regex=False)]
    if variant:
        df = df[df["variant"] == variant]
    paths = []
    for label in T.select_gpus(df, gpu, PROG) if len(df) else []:
        rows = T.latest(df[df[T.GPU] == label])
        rows, meaningful = T.timed(rows)
        for v in T.variant_order(rows["variant"]):
            mine = rows[rows["variant"] == v]
            pair = axis_pair(mine)
            if pair is None:
                continue
            # a block search at a shape: at least two cells of the heatmap's axis pair were tried
            shapes = [(key, g) for key, g in mine.groupby(list(T.SHAPE_COLUMNS), sort=True, dropna=False)
                      if len(g[list(pair)].drop_duplicates()) >= 2 and C.drawable(g).any()]
            if not shapes:
                continue
            paths += _figure(shapes, v, pair, label, dtype, meaningful, out, svg)
    return paths


def _figure(shapes, variant, pair, gpu, dtype, meaningful, out, svg) -> list[Path]:
    notes = []
    if len(shapes) > MAX_PANELS:
        shapes = sorted(shapes, key=lambda kg: -len(kg[1]))[:MAX_PANELS]
        notes.append(f"first {MAX_PANELS} shapes by number of configs")
    shapes = sorted(shapes, key=lambda kg: kg[0])
    ncols = min(len(shapes), 3)
    nrows = -(-len(shapes) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(4.6 * ncols + 0.4, 7.5), 4.3 * nrows + 1.8), squeeze=False,
                             layout="constrained")
    m_col, n_col = pair
    all_rows = pd.concat([g for _, g in shapes])
    others = [f for f in T.BLOCK_FIELDS if f not in pair and T.text(all_rows[f]).nunique() > 1]
    for ax in axes.flat[len(shapes):]:
        ax.set_visible(False)
    for ax, (_, rows) in zip(axes.flat, shapes):
        _panel(ax, rows, m_col, n_col, others)
    over = ", ".join(others) if others else "nothing else (one config per cell)"
    lines = [f"Block-size sweep: {variant} — {gpu}, {dtype or 'all dtypes'}{C.untimed_note(meaningful)}",
             C.gpu_title(all_rows, gpu),
             f"cell = best correct TFLOPS over {over}", T.FLOP_CONVENTION,
             "black frame = best cell · hatched = tried, no correct result", "blank = not tried · "
             "red ! = a wrong config in the cell", *notes]
    fig.suptitle("\n".join(lines), fontsize=9.5)
    stem = f"heatmap_{variant}_{T.slug(gpu)}_{dtype or 'all'}"
    return C.save(fig, out, stem, svg)


def _panel(ax, rows: pd.DataFrame, m_col: str, n_col: str, others: list[str]) -> None:
    ms = sorted(rows[m_col].dropna().unique())
    ns = sorted(rows[n_col].dropna().unique())
    grid = np.full((len(ms), len(ns)), np.nan)
    results = rows[T.is_result(rows) & rows["tflops"].notna()]
    for (m, n), g in results.groupby([m_col, n_col]):
        grid[ms.index(m), ns.index(n)] = g["tflops"].max()
    finite = grid[np.isfinite(grid)]
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", origin="lower", aspect="auto",
                   vmin=finite.min() if len(finite) else 0, vmax=finite.max() if len(finite) else 1)
    best_row = results.loc[results["tflops"].idxmax()] if len(results) else None
    mid = (finite.min() + finite.max()) / 2 if len(finite) else 0
    for (m, n), cell in rows.groupby([m_col, n_col]):
        i, j = ms.index(m), ns.index(n)
        any_wrong = T.is_wrong(cell).any()
        if np.isfinite(grid[i, j]):
            ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=9,
                    color="white" if grid[i, j] < mid else "black")
        else:
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.85", hatch="xx", edgecolor="0.5",
                                   linewidth=0))
            failed = cell[T.is_failed(cell)]
            status = failed["status"].mode().iloc[0] if len(failed) else cell["status"].mode().iloc[0]
            label = "WRONG" if any_wrong else STATUS_SHORT.get(status, status)
            ax.text(j, i, label, ha="center", va="center", fontsize=8, fontweight="bold",
                    color="red" if any_wrong else "black",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
            continue
        if any_wrong:
            ax.text(j + 0.42, i + 0.42, "!", ha="right", va="top", fontsize=11, fontweight="bold", color="red")
    if best_row is not None:
        i, j = ms.index(best_row[m_col]), ns.index(best_row[n_col])
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=3))
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="white", linewidth=1))
    ax.set_xticks(range(len(ns)), [str(int(n)) for n in ns])
    ax.set_yticks(range(len(ms)), [str(int(m)) for m in ms])
    ax.set_xlabel(n_col)
    ax.set_ylabel(m_col)
    title = T.shape_text(rows.iloc[0])
    if best_row is not None:
        best = " ".join(f"{f}={_fmt(best_row[f])}" for f in others if pd.notna(best_row[f])) or "-"
        title += f"\nbest {best_row['tflops']:.0f} TFLOPS: {m_col}={int(best_row[m_col])} " \
                 f"{n_col}={int(best_row[n_col])}\n" + textwrap.fill(best, TITLE_CHARS)
    else:
        title += "\nno correct config"
    ax.set_title(title, fontsize=8.5)
    ax.figure.colorbar(im, ax=ax, shrink=0.85, label="TFLOPS")


def _fmt(value) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    try:
        return str(int(value))
    except (TypeError, ValueError):
        return str(value)


if __name__ == "__main__":
    raise SystemExit(main())
