"""Shared drawing helpers for plots/: colours, axes, titles, saving. Table reading lives in runners.tables (its
public API: plots import it as `from runners import tables as T`).

Plots read tables; they never measure. A row is a *result* only when ``status == "ok"`` and ``correct`` is
True; every other row may only ever be drawn as a failure marker.
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: plots run headless (CI, GPU hosts)
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from runners import tables as T  # noqa: E402
from runners.tables import (GPU, UsageError, is_failed, is_result, is_triton, is_wrong, kernel_rows,  # noqa: E402
                            select_dtype, select_gpus)

# One colour per design and per baseline, fixed by its place in the registry (runners.tables: TRITON_VARIANTS,
# BASELINE_VARIANTS, registration order), never by a hash of the name; a design's modes ("+deterministic") keep its
# colour and change the line style and marker. Red, black and dim grey are left out: wrong / failure markers and the
# peak line use them.
DESIGN_COLORS = ("tab:blue", "tab:orange", "indigo", "tab:cyan", "gold", "tab:green", "teal", "navy", "darkkhaki",
                 "sienna", "lime", "steelblue")
BASELINE_COLORS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:gray", "peru", "darkseagreen", "plum")
PINNED_COLORS = {"fa4": "magenta"}  # FlashAttention-4: no other series (nor a palette) uses magenta
DESIGN_STYLE = {"linestyle": "-", "linewidth": 2.0, "marker": "o", "markersize": 4}
BASELINE_STYLE = {"linestyle": "--", "linewidth": 1.4, "marker": "s", "markersize": 3.5}
# suffix of a design's mode (runners.tables.reading names the series) -> how its line differs from the design's
MODE_STYLES = {"+deterministic": {"linestyle": "-.", "marker": "^", "markersize": 5}}
_unregistered: list[str] = []  # names in tables but not in the registry (a removed design): leftover colours, in
# the order this process first draws them


def _palette_colors() -> dict:
    """{registered design or baseline: its colour}: each list's palette in registration order, pinned ones apart."""
    colors = dict(PINNED_COLORS)
    for names, palette in ((T.TRITON_VARIANTS, DESIGN_COLORS), (T.BASELINE_VARIANTS, BASELINE_COLORS)):
        free = [c for c in palette if c not in PINNED_COLORS.values()]
        for i, name in enumerate(n for n in names if n not in PINNED_COLORS):
            colors[name] = free[i % len(free)]
    return colors


def variant_modes(variant: str) -> tuple:
    """The mode suffixes a registered variant's series can carry: "+deterministic" when its Blocks has the field."""
    from dataclasses import fields
    impl = dict(T.registered_variants()).get(variant)
    names = {f.name for f in fields(impl.Blocks)} if impl is not None and hasattr(impl, "Blocks") else set()
    return tuple(suffix for suffix in MODE_STYLES if suffix.lstrip("+") in names)


def plot_series() -> list[str]:
    """Every series a figure can draw, from the registry: each variant, then each of its modes."""
    return [f"{name}{mode}" for name in T.VARIANT_ORDER for mode in ("", *variant_modes(name))]


def variant_color(variant: str) -> str:
    base = T.base_variant(variant)
    colors = _palette_colors()
    if base in colors:
        return colors[base]
    if base not in _unregistered:
        _unregistered.append(base)
    spare = [c for c in DESIGN_COLORS + BASELINE_COLORS if c not in colors.values()] or list(BASELINE_COLORS)
    return spare[_unregistered.index(base) % len(spare)]


def variant_style(variant: str) -> dict:
    """Designs solid and thick, their modes dash-dotted with triangles; baselines dashed with squares."""
    style = dict(DESIGN_STYLE if is_triton(variant) else BASELINE_STYLE, color=variant_color(variant))
    for suffix, mode in MODE_STYLES.items():
        if variant.endswith(suffix):
            style.update(mode)
    return style


# ----------------------------------------------------------------------------------------------------- drawing
def json_dict(text) -> dict:
    """A JSON-object column's value (kernel_ms, resources_json, ncu_*_pct) as a dict; {} when empty or not one."""
    if not isinstance(text, str) or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def seq_label(n: float) -> str:
    n = int(n)
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    if n >= 1024 and n % 512 == 0:
        return f"{n / 1024:.1f}k"
    return str(n)


def print_paths(paths: list, empty: str) -> int:
    """A figure command's end: UsageError(empty) when it drew nothing, else each written path on its own line."""
    if not paths:
        raise UsageError(empty)
    for p in paths:
        print(p)
    return 0


def kernel_only(df: pd.DataFrame, prog: str, timed: str = "backward") -> pd.DataFrame:
    """The kernel rows that time `timed` (the backward alone unless a figure asks for forward / train rows, issue
    42): model-step rows (bench_kind=model_step, drawn by plots.step_time) are never drawn as kernel points.
    Tables of model-step rows only, or without a row of that kind, are a one-line UsageError saying so."""
    from spec import TIMED
    if timed not in TIMED:
        raise UsageError(f"{prog}: timed must be one of {', '.join(TIMED)}, got {timed!r}")
    kernels = kernel_rows(df, timed)
    if kernels.empty and len(df):
        if kernel_rows(df, None).empty:
            raise UsageError(f"{prog}: only model-step rows ({len(df)}) in the tables: "
                             "python -m plots.step_time draws them")
        kinds = ", ".join(sorted(set(kernel_rows(df, None)["timed"].astype(str))))
        raise UsageError(f"{prog}: no timed={timed} rows in the tables (their rows time: {kinds}; pick one with "
                         "timed=)")
    return kernels


def per_gpu(df: pd.DataFrame, prog: str, *, dtype: str | None, gpu: str | None, variant: str | None = None) -> list:
    """[(GPU label, its kernel rows)] of the tables after the dtype= / variant= / gpu= selections ([] when none is
    left: the caller says why)."""
    df = select_dtype(kernel_only(df, prog), dtype, prog)
    if variant:
        df = df[df["variant"] == variant]
    return [(label, df[df[GPU] == label]) for label in (select_gpus(df, gpu, prog) if len(df) else [])]


def drawable(rows: pd.DataFrame) -> pd.Series:
    """Rows a figure can show: correct results, or failures drawn as markers (never skipped / unsupported)."""
    return is_result(rows) | is_failed(rows)


def status_text(rows: pd.DataFrame) -> str:
    """'3 skipped, 1 unsupported': the rows' statuses (checked-and-wrong rows counted as wrong)."""
    status = rows["status"].where(~is_wrong(rows), "wrong")
    return ", ".join(f"{n} {s}" for s, n in status.value_counts().sort_index().items())


def nothing_to_draw(prog: str, rows: pd.DataFrame, *, dtype: str | None = None, everything: pd.DataFrame | None = None,
                    need: str = "a correct result with TFLOPS or a failure") -> UsageError:
    """The one-line UsageError (exit 2) of a figure command with nothing to draw, naming the rows' statuses and
    the other dtypes that have correct results."""
    where = f" for dtype={dtype}" if dtype else ""
    counts = status_text(rows) if len(rows) else "no rows"
    text = f"{prog}: nothing to draw{where}: {len(rows)} row(s) ({counts}), none is {need}"
    if dtype and everything is not None and len(everything):
        others = sorted(set(everything.loc[is_result(everything), "dtype"]) - {dtype, ""})
        if others:
            text += "; correct results exist for " + ", ".join(f"dtype={d}" for d in others)
    return UsageError(text)


def log2_seq_axis(ax, seqs) -> None:
    """Log2 x axis with a tick at each value, except values within 25 % of the previous tick (their labels would
    overlap, e.g. mean document lengths 512 and 516)."""
    ax.set_xscale("log", base=2)
    ticks: list[int] = []
    for seq in sorted({int(s) for s in seqs if pd.notna(s)}):
        if not ticks or seq > 1.25 * ticks[-1]:
            ticks.append(seq)
    seqs = ticks
    if seqs:
        ax.set_xticks(seqs)
        ax.set_xticklabels([seq_label(s) for s in seqs])
        ax.minorticks_off()


def gpu_title(rows: pd.DataFrame, gpu: str) -> str:
    """'NVIDIA H100 80GB HBM3 (sm 9.0, 132 SMs) · torch X · triton Y · commit abc1234'."""
    parts = [gpu]
    cc, sms = one_value(rows, "compute_capability"), one_value(rows, "sm_count")
    extra = ", ".join(p for p in (f"sm {cc}" if cc else "", f"{int(float(sms))} SMs" if sms else "") if p)
    if extra:
        parts[0] += f" ({extra})"
    for col in ("torch", "triton"):
        value = one_value(rows, col)
        if value:
            parts.append(f"{col} {value}")
    commits = sorted({c[:7] for c in rows["commit"] if c})
    if commits:
        parts.append(f"commit {commits[0]}" if len(commits) == 1 else f"{len(commits)} commits")
    return " · ".join(parts)


def one_value(rows: pd.DataFrame, col: str) -> str:
    values = [str(v) for v in rows[col].dropna().unique() if str(v) not in ("", "nan")]
    if not values:
        return ""
    return values[0] if len(values) == 1 else "/".join(sorted(values))


def untimed_note(meaningful: bool) -> str:
    return "" if meaningful else "  —  CPU INTERPRETER: TIMINGS NOT MEANINGFUL"


def save(fig, out: str | Path, stem: str, svg: bool) -> list[Path]:
    """Write ``stem.png`` (and ``stem.svg``) under ``out``; close the figure; return the paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png"]
    fig.savefig(paths[0], dpi=130)
    if svg:
        paths.append(out / f"{stem}.svg")
        fig.savefig(paths[1])
    plt.close(fig)
    return paths


# ------------------------------------------------------------------ the head_dim x causal panels of compare/memory
POINT = ("variant", "seq", "head_dim", "causal")


def uncovered_failures(failed: pd.DataFrame, results: pd.DataFrame) -> pd.DataFrame:
    """Failed rows at points where the variant has no result with any other block config."""
    have = set(zip(*(results[c] for c in POINT)))
    keep = [key not in have for key in zip(*(failed[c] for c in POINT))]
    return failed[pd.Series(keep, index=failed.index, dtype=bool)]


def seq_panels(rows: pd.DataFrame, extra_height: float):
    """A figure with one panel per causal (rows) x head_dim (columns) -> (fig, ncols, cells); each cell is
    (ax, head_dim, causal, is_bottom_row, is_left_column)."""
    head_dims = sorted(rows["head_dim"].dropna().unique())
    causals = sorted(rows["causal"].unique())
    ncols, nrows = len(head_dims), len(causals)
    fig, axes = plt.subplots(nrows, ncols, figsize=(max(4.3 * ncols + 0.6, 9.0), 3.5 * nrows + extra_height),
                             sharey=True, squeeze=False, layout="constrained")
    cells = [(axes[i][j], hd, causal, i == nrows - 1, j == 0)
             for i, causal in enumerate(causals) for j, hd in enumerate(head_dims)]
    return fig, ncols, cells


def in_panel(rows: pd.DataFrame, head_dim, causal: bool) -> pd.DataFrame:
    """The rows of one head_dim x causal panel."""
    return rows[(rows["head_dim"] == head_dim) & (rows["causal"] == causal)]


def finish_seq_panel(ax, rows: pd.DataFrame, head_dim, causal: bool, is_bottom: bool, is_left: bool,
                     ylabel: str) -> None:
    """The log2 sequence axis of the panel's rows, its title (head_dim, causal, and the shape family in the rows'
    `family` column, when there is one), grid and labels."""
    log2_seq_axis(ax, rows["seq"])
    ax.set_xlim(rows["seq"].min() / 1.3, rows["seq"].max() * 1.3)
    title = f"head_dim={int(head_dim)}, {'causal' if causal else 'non-causal'}"
    if "family" in rows.columns and len(rows):
        title += "\n" + rows["family"].iloc[0]
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    if is_bottom:
        ax.set_xlabel("sequence length Nq (log2)")
    if is_left:
        ax.set_ylabel(ylabel)


def failure_handles(failed: pd.DataFrame) -> list:
    """Legend entries for the failure markers present: wrong gradients (red X), other failures (grey X)."""
    from matplotlib.lines import Line2D
    handles = []
    for present, color, label in ((is_wrong(failed).any(), "red", "wrong gradients (not a result)"),
                                  ((~is_wrong(failed)).any(), "dimgray", "failed: oom / compile / resources / error")):
        if present:
            handles.append(Line2D([], [], linestyle="none", marker="X", markersize=9, markerfacecolor="white",
                                  markeredgecolor=color, label=label))
    return handles

