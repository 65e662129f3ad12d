"""One Markdown page summarising result tables: environments, best variant per shape, failures, plots.

    python -m plots.report results=<dir or file> [out=plots/out] [gpu=<substring>] [baseline=<path | commit>]
                           [threshold=0.05] [svg=true]

Writes ``<out>/report.md`` and the figures it embeds (relative paths, same folder): the TFLOPS compare and
peak-memory plots per GPU and dtype, block-size heatmaps and registers/spills-vs-TFLOPS views when the tables
hold a block sweep, a resources section (per-kernel time shares, compiled resources), a tensor-pipe utilization
section and figure (Nsight Compute columns of bench.ncu=true sweeps; a line saying why when absent), and the
cross-GPU view when they hold more than one GPU. Model-step rows (bench_kind=model_step) get their own section, "Step
time by design" (plots.step_time's figure and a table), and are left out of every kernel section. With ``baseline=`` it adds the regression check of
``runners.regress`` (candidate = ``results``); the report still exits 0 — ``runners.regress`` is the gate.
"""
from __future__ import annotations

import datetime
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from plots import common as C
from runners import tables as T
from plots import compare, cross_gpu, heatmap, memory, resources, step_time, utilization

PROG = "plots.report"
DEFAULTS = {"results": None, "out": "plots/out", "gpu": None, "baseline": None, "threshold": 0.05, "svg": False}
FA2, CUDNN, FA4 = "sdpa_flash", "sdpa_cudnn", "fa4"
RATIO_TO = (("FA2", FA2), ("cuDNN", CUDNN), ("FA4", FA4))  # the best table's ×<name> columns: ratio to that baseline
NO_KERNELS = "_(no kernel rows: the tables hold model-step rows only, under Step time by design)_\n"


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    results = T.require(args, "results", PROG)
    df, unreadable = load(results)
    if args["gpu"]:
        df = df[df[T.GPU].isin(T.select_gpus(df, args["gpu"], PROG))]
    path = write(df, args["out"], source=results, baseline=args["baseline"], threshold=args["threshold"],
                 svg=args["svg"], unreadable=unreadable)
    if not any(C.drawable(df)):
        print(f"warning: {PROG}: no figures: {len(df)} row(s) ({C.status_text(df)}), none a correct result or a "
              f"failure; {path} says what was left out", file=sys.stderr)
    print(path)
    return 0


def load(path: str | Path) -> tuple[pd.DataFrame, list[str]]:
    """``T.load`` (not strict), also returning the files it skipped ('<file>: <why>'), each still warned about in
    one line on stderr, so that the report can name them."""
    unreadable: list[str] = []
    return T.load(path, skipped=unreadable), unreadable


def write(df: pd.DataFrame, out: str | Path, *, source: str = "", baseline: str | None = None,
          threshold: float = 0.05, svg: bool = False, unreadable: list[str] | tuple = ()) -> Path:
    """Write ``<out>/report.md`` and its figures. Everything is written into a temporary folder next to ``out``
    first and moved into ``out`` only when the whole report is there: a failure leaves no half-written report
    (and no empty ``out``) behind."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise T.UsageError(f"{PROG}: out={str(out)!r} is a file, not a folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    try:
        _write(df, tmp, source=source, baseline=baseline, threshold=threshold, svg=svg, unreadable=unreadable)
        out.mkdir(exist_ok=True)
        for item in sorted(tmp.iterdir()):
            os.replace(item, out / item.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "report.md"


def _write(df: pd.DataFrame, out: Path, *, source: str, baseline: str | None, threshold: float, svg: bool,
           unreadable) -> Path:
    steps, df_all = T.step_rows(df), df
    df = T.kernel_rows(df)  # the kernel sections; model-step rows have their own
    figures, notes = _figures(df, out, svg) if len(df) or steps.empty else ([], [])
    step_part = step_section(steps, out, svg) if len(steps) else []
    parts = [
        "# FlashAttention backward — results report\n",
        f"Source: `{source}` · {len(df_all)} rows, {int(T.is_result(df_all).sum())} correct results, "
        f"{int(T.is_wrong(df_all).sum())} wrong"
        + (f" ({len(steps)} of the rows are model-step rows)" if len(steps) else "") + " · generated "
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC\n",
        f"TFLOPS follow the {T.FLOP_CONVENTION} (4·B·H·Nq·Nk·D per forward). Only rows with status `ok` and "
        "correct gradients are results; nothing else is ever drawn or ranked as a result.\n",
        "## Environments\n",
        T.markdown_table(environments(df_all)),
        "## Best variant per shape\n",
        "Fastest correct block config per variant; *×FA2*, *×cuDNN* and *×FA4* are TFLOPS ratios to "
        f"`{FA2}`, `{CUDNN}` and `{FA4}` on the same GPU, shape and dtype (>1: faster; `-`: no result of that "
        "baseline there). Rows whose timings are not "
        "meaningful (CPU interpreter) are left out.\n",
        best_tables(df) if len(df) or steps.empty else NO_KERNELS,
        "## Failures and wrong points\n",
        failures(df) if len(df) or steps.empty else NO_KERNELS,
        "## Left out\n",
        left_out(df, unreadable),
        "## Resources\n",
        resources.section(df) if len(df) or steps.empty else NO_KERNELS,
        "## Tensor-pipe utilization (Nsight Compute)\n",
        utilization.section(df) if len(df) or steps.empty else NO_KERNELS,
        *step_part,
    ]
    if baseline:
        parts += ["## Regressions\n", _regressions(baseline, source, threshold)]
    parts.append("## Plots\n")
    for title, path in figures:
        parts.append(f"### {title}\n\n![{title}]({path.name})\n")
    if not figures and df.empty and len(steps):
        parts.append("_(no kernel figures: the tables hold only model-step rows, drawn under Step time by design)_\n")
    elif not figures:
        parts.append("_(no figures: no meaningful correct results)_\n")
    if notes:
        parts.append("\n".join(f"- {n}" for n in notes) + "\n")
    path = out / "report.md"
    path.write_text("\n".join(parts))
    return path


def step_section(steps: pd.DataFrame, out: Path, svg: bool) -> list[str]:
    """The "Step time by design" section of the model-step rows: plots.step_time's figure and its table."""
    parts = ["## Step time by design\n",
             "The model-step benchmark (`runners.model_step`): one training step (forward, backward, AdamW step) of a "
             "small decoder whose attention is each design, eager and compiled. *step ms* is the median [p20–p80]; "
             "*×sdpa_flash* is sdpa_flash's step time in the same mode over this one (>1: faster); *attn bwd share* "
             "is the attention backward's share of the step's GPU kernel time. The accuracy gate is training "
             "agreement: the max |Δloss| against the baseline's curve, the baseline's own run-to-run spread, and the "
             "tolerance max(spread, floor); a design beyond it is `wrong` and has no step time here.\n"]
    try:
        paths = step_time.draw(steps, out, svg=svg)
    except T.UsageError as err:
        paths = []
        parts.append(f"_(no figure: {err})_\n")
    parts += [f"![Step time by design — {p.stem}]({p.name})\n" for p in paths if p.suffix == ".png"]
    table = step_time.table(steps)
    if table.empty:
        return parts + ["_(no model-step row ran)_\n"]
    for gpu, g in table.groupby("GPU", sort=True):
        parts.append(f"### {gpu}\n")
        parts.append(T.markdown_table(g.drop(columns=["GPU"])))
    return parts


def environments(df: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for gpu, g in df.groupby(T.GPU, sort=True):
        commits = sorted({c[:10] for c in g["commit"] if c})
        stamps = g["_ts"].dropna()
        when = "" if stamps.empty else f"{stamps.min():%Y-%m-%d}" + (
            "" if stamps.max().date() == stamps.min().date() else f" … {stamps.max():%Y-%m-%d}")
        rows.append({"GPU": gpu, "device": C.one_value(g, "device"), "cc": C.one_value(g, "compute_capability"),
                     "SMs": _int_text(C.one_value(g, "sm_count")), "driver": C.one_value(g, "driver"),
                     "CUDA": C.one_value(g, "cuda"), "torch": C.one_value(g, "torch"), "triton": C.one_value(g, "triton"),
                     "python": C.one_value(g, "python"), "commit": ", ".join(commits) + (" (dirty)" if g["dirty"].any()
                                                                                     else ""),
                     "sweeps": ", ".join(sorted(set(g["sweep_id"]) - {""})), "rows": len(g), "measured": when,
                     "timings": "meaningful" if g["timing_meaningful"].all() else
                     ("NOT meaningful" if not g["timing_meaningful"].any() else "partly meaningful")})
    return pd.DataFrame(rows)


def _int_text(text: str) -> str:
    try:
        return str(int(float(text)))
    except ValueError:
        return text


def best_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (GPU, dtype, shape): best variant overall and best Triton design, with ratios to FA2/cuDNN/FA4."""
    rows = T.latest(df)
    rows = rows[rows["timing_meaningful"] & T.is_result(rows)]
    best = T.best_config(rows)
    if best.empty:
        return pd.DataFrame()
    best = best.assign(_pct=T.pct_peak(best))
    out = []
    keys = [T.GPU, "dtype", *T.SHAPE_COLUMNS]
    for key, g in best.groupby(keys, sort=True, dropna=False):
        g = g.set_index("variant")
        top = g["tflops"].idxmax()
        triton = g[g.index.map(T.is_triton).astype(bool)]
        base = {name: g["tflops"].get(variant) for name, variant in RATIO_TO}
        row = {"GPU": key[0], "dtype": key[1], "shape": T.shape_text(g.iloc[0]),
               "best": f"{top} {g.at[top, 'tflops']:.1f}", "% peak": _pct(g.at[top, "_pct"]),
               **{f"best ×{name}": _ratio(g.at[top, "tflops"], b) for name, b in base.items()}}
        t = triton["tflops"].idxmax() if len(triton) else None
        row.update({"best Triton": f"{t} {triton.at[t, 'tflops']:.1f}" if t else "-",
                    "Triton blocks": (T.blocks_text(triton.loc[t]) or "-") if t else "-",
                    **{f"Triton ×{name}": _ratio(triton.at[t, "tflops"], b) if t else "-"
                       for name, b in base.items()}})
        row.update({name: _num(b) for name, b in base.items()})
        out.append(row)
    return pd.DataFrame(out)


def best_tables(df: pd.DataFrame) -> str:
    table = best_table(df)
    if table.empty:
        return "_(no correct result with meaningful timings)_\n"
    parts = []
    for (gpu, dtype), g in table.groupby(["GPU", "dtype"], sort=True):
        parts.append(f"### {gpu} — {dtype}\n")
        parts.append(T.markdown_table(g.drop(columns=["GPU", "dtype"])))
    return "\n".join(parts)


def _num(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.1f}"


def _ratio(value, base) -> str:
    return "-" if base is None or pd.isna(base) or not base else f"{value / base:.2f}"


def _pct(value) -> str:
    return "-" if pd.isna(value) else f"{value:.0f}%"


def failures(df: pd.DataFrame) -> str:
    rows = T.latest(df)
    bad = rows[~T.is_result(rows)]
    if bad.empty:
        return "Every point is a correct result.\n"
    status = bad["status"].where(~T.is_wrong(bad), "wrong")
    counts = pd.crosstab(bad["variant"], status).reset_index().rename(columns={"variant": "variant \\ status"})
    parts = ["Points that are not results, by variant and status:\n", T.markdown_table(counts.astype(str))]
    wrong = bad[T.is_wrong(bad)]
    if len(wrong):
        listing = pd.DataFrame({
            "GPU": wrong[T.GPU], "variant": wrong["variant"], "shape": [T.shape_text(r) for _, r in wrong.iterrows()],
            "dtype": wrong["dtype"], "blocks": [T.blocks_text(r) or "-" for _, r in wrong.iterrows()],
            "max |Δ| dq/dk/dv": [f"{r['max_abs_dq']:.3g}/{r['max_abs_dk']:.3g}/{r['max_abs_dv']:.3g}"
                                 for _, r in wrong.iterrows()],
            "reason": wrong["reason"].fillna("").astype(str)})
        parts += ["\n**Wrong gradients** (never plotted as results):\n", T.markdown_table(listing)]
    return "\n".join(parts)


MAX_LISTED = 40  # rows of the left-out listing; the rest are counted


def left_out(df: pd.DataFrame, unreadable) -> str:
    """What the report did not use, by name: files that could not be read, points that never ran (skipped over
    the CPU budget, unsupported) with their reasons, correct results without TFLOPS (NaN), rows whose timings are
    not meaningful. (Figures not drawn are
    noted under Plots.)"""
    parts = []
    if unreadable:
        parts.append(f"**{len(unreadable)} file(s) not read** (not result tables):\n")
        parts.append("\n".join(f"- `{u}`" for u in unreadable) + "\n")
    rows = T.latest(df)
    never = rows[rows["status"].isin(("skipped", "unsupported"))]
    if len(never):
        parts.append(f"**{len(never)} point(s) not run** ({C.status_text(never)}), never drawn or ranked:\n")
        parts += _listing(never)
    no_tflops = rows[T.is_result(rows) & rows["timing_meaningful"] & rows["tflops"].isna()]
    if len(no_tflops):
        parts.append(f"**{len(no_tflops)} correct result(s) without TFLOPS**, never drawn or ranked:\n")
        parts += _listing(no_tflops.assign(reason="tflops is NaN"))
    untimed = rows[T.is_result(rows) & ~rows["timing_meaningful"]]
    if len(untimed):
        parts.append(f"- {len(untimed)} correct result(s) with timings that are not meaningful (CPU interpreter): "
                     "left out of the best-variant tables.\n")
    return "\n".join(parts) if parts else "Nothing: every file was read and every point ran.\n"


def _listing(rows: pd.DataFrame) -> list[str]:
    """The left-out points by name (GPU, variant, shape, dtype, status, reason), MAX_LISTED of them, the rest
    counted."""
    rows = rows.sort_values([T.GPU, "dtype", "variant", "seq", "head_dim"], kind="stable")
    listing = pd.DataFrame({
        "GPU": rows[T.GPU], "variant": rows["variant"], "shape": [T.shape_text(r) for _, r in rows.iterrows()],
        "dtype": rows["dtype"], "status": rows["status"], "reason": rows["reason"].astype(str)})
    more = [f"_… and {len(listing) - MAX_LISTED} more._\n"] if len(listing) > MAX_LISTED else []
    return [T.markdown_table(listing.head(MAX_LISTED)), *more]


def _regressions(baseline: str, source: str, threshold: float) -> str:
    from runners.regression import measured as regress

    try:
        base, cand = regress.resolve_sides(baseline, source, None)
        cmp = regress.compare(base.rows, cand.rows, threshold)
    except T.UsageError as err:
        return f"_regression check not possible: {err}_\n"
    lines = [f"- baseline: {base.description}", f"- candidate: {cand.description}",
             f"- {regress.rule_text(cmp.threshold, cmp.cross_gpu, regress.has_steps(cmp))}",
             *[f"- {s}" for s in regress.summary_lines(cmp)], ""]
    notable = regress.display_table(cmp, only_notable=not cmp.cross_gpu)
    steps = regress.step_display_table(cmp, only_notable=not cmp.cross_gpu)
    text = "\n".join(lines) + "\n" + T.markdown_table(notable)
    if regress.has_steps(cmp):
        text += "\n" + regress.STEP_HEADING + "\n\n" + T.markdown_table(steps)
    return text


def _figures(df: pd.DataFrame, out: Path, svg: bool) -> tuple[list[tuple[str, Path]], list[str]]:
    figures, notes = [], []
    dtypes = sorted(df["dtype"].unique(), key=lambda d: (d != "bf16", d))
    for dtype in dtypes:
        for name, module in (("TFLOPS vs sequence length", compare), ("Peak memory", memory),
                             ("Block-size heatmap", heatmap), ("Registers / spills vs TFLOPS", resources),
                             ("TFLOPS vs tensor-pipe utilization", utilization)):
            try:
                paths = module.draw(df, out, dtype=dtype, svg=svg)
            except T.UsageError as err:
                notes.append(f"{name} ({dtype}): {err}")
                continue
            figures += [(f"{name} — {_describe(p)}", p) for p in paths if p.suffix == ".png"]
        if df[T.GPU].nunique() > 1:
            try:
                paths = cross_gpu.draw(df, out, dtype=dtype, svg=svg)
            except T.UsageError as err:
                notes.append(f"cross-GPU ({dtype}): {err}")
                paths = []
            figures += [(f"Cross-GPU — {dtype}", p) for p in paths if p.suffix == ".png"]
    return figures, notes


def _describe(path: Path) -> str:
    """'heatmap_two_pass_h200_bf16' -> 'two_pass · h200 · bf16' (the kind, then variant, GPU slug, dtype)."""
    parts = path.stem.rsplit("_", 2)
    if len(parts) < 3:
        return path.stem
    kind_and_variant = parts[0].split("_", 1)
    return " · ".join(kind_and_variant[1:] + parts[1:])


if __name__ == "__main__":
    raise SystemExit(main())
