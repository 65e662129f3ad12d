"""Figures and a comparison table for runners.tune studies (rows with a `study` column).

    python -m plots.study results=<rows dir or file> [study=<name substring>] [grid=<sweep=blocks rows>]
                          [out=plots/out] [svg=true]

One figure per study, `study_<name>.png`: left, the optimization history (each measured config's median
backward ms in measuring order, the best so far, pruned trials as X markers on top: red = wrong gradients,
grey = resources / oom / compile_error / error / unsupported, i.e. invalid blocks); right, the parameter
importances Optuna computes (`optuna.importance`, PED-ANOVA: which block fields the time depends on). The
study is rebuilt from its rows (runners/tuning/trials.py), never measured. Drawn here rather than with
`optuna.visualization.matplotlib`, whose history leaves pruned trials out and which makes one figure per view.

With grid=<rows of an exhaustive `sweep=blocks` run> the history also draws the grid's best (and best + 2 %),
and `study_comparison.md` (also printed) lists, per study: configs measured vs grid points, the tuner's best
vs the grid's best (same variant and shape, correct rows only) and their ratio.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd
from matplotlib.ticker import MaxNLocator

from plots import common as C  # noqa: I001 - sets the Agg backend first
from runners import tables as T
from runners.tuning import trials

PROG = "plots.study"
DEFAULTS = {"results": None, "study": None, "grid": None, "out": "plots/out", "svg": False}
SHAPE = ("variant", "batch", "heads", "kv_heads", "seq", "seq_k", "head_dim", "causal", "dtype", "layout")
WITHIN = 1.02  # "within 2 % of the exhaustive best"


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    df = T.load(T.require(args, "results", PROG))
    grid = T.load(args["grid"]) if args["grid"] else None
    paths, table = draw(df, args["out"], study=args["study"], grid=grid, svg=args["svg"])
    if not paths:
        raise T.UsageError(f"{PROG}: no study rows (no `study` column set) in {args['results']}")
    if table is not None:
        print(table)
    for p in paths:
        print(p)
    return 0


def _is_result(rows: pd.DataFrame) -> pd.Series:
    return (rows["status"] == "ok") & rows["correct"].fillna(False).astype(bool)


def grid_best(grid: pd.DataFrame, rows: pd.DataFrame) -> tuple[pd.Series | None, int]:
    """The fastest correct row of the grid at the study's variant and shape, and the grid's point count."""
    shape = {c: rows[c].iloc[0] for c in SHAPE if c in rows and c in grid}
    same = grid
    for col, value in shape.items():
        same = same[same[col] == value]
    if "study" in same:
        same = same[same["study"].isna()]
    same = same.sort_values("timestamp").drop_duplicates("config_key", keep="last")
    ok = same[_is_result(same)]
    return (ok.loc[ok["ms"].idxmin()] if len(ok) else None), len(same)


def comparison(name: str, rows: pd.DataFrame, grid: pd.DataFrame) -> dict:
    ok = rows[_is_result(rows)]
    best = ok.loc[ok["ms"].idxmin()] if len(ok) else None
    gbest, points = grid_best(grid, rows)
    ratio = best["ms"] / gbest["ms"] if best is not None and gbest is not None else float("nan")
    return {"study": name, "trials": len(rows), "grid points": points,
            "trials / grid": f"{len(rows) / points:.0%}" if points else "",
            "pruned": int((~_is_result(rows)).sum()),
            "tuner best ms": round(best["ms"], 4) if best is not None else None,
            "tuner best TFLOPS": round(best["tflops"], 1) if best is not None else None,
            "grid best ms": round(gbest["ms"], 4) if gbest is not None else None,
            "grid best TFLOPS": round(gbest["tflops"], 1) if gbest is not None else None,
            "tuner / grid ms": round(ratio, 4),
            "within 2 %": bool(ratio <= WITHIN) if ratio == ratio else None,
            "tuner best blocks": best["blocks_json"] if best is not None else "",
            "grid best blocks": gbest["blocks_json"] if gbest is not None else ""}


def importances(built) -> dict:
    """Optuna's parameter importances (PED-ANOVA, its default: no scikit-learn needed) of a study."""
    import optuna
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optuna.importance.get_param_importances(built)


def _history(ax, rows: pd.DataFrame, grid_row, points: int) -> None:
    trial = rows.index + 1
    ok = _is_result(rows)
    ax.plot(trial[ok], rows.loc[ok, "ms"], "o", color="tab:blue", label="measured config (correct)")
    best = rows["ms"].where(ok).cummin()
    ax.step(trial, best, where="post", color="tab:red", label="best so far")
    for status, group in rows[~ok].groupby("status"):
        ax.plot(trial[group.index], [0.96] * len(group), "X", transform=ax.get_xaxis_transform(),
                color="red" if status == "wrong" else "grey", markersize=8, clip_on=False,
                label=f"pruned: {status}" + (" (invalid blocks)" if status == "unsupported" else ""))
    if grid_row is not None:
        ax.axhline(grid_row["ms"], color="black", linestyle="--", linewidth=1,
                   label=f"grid best of {points}: {grid_row['ms']:.4g} ms")
        ax.axhline(grid_row["ms"] * WITHIN, color="grey", linestyle=":", linewidth=1, label="grid best + 2 %")
    ax.set_xlabel("trial (configs in measuring order)")
    ax.set_ylabel("backward ms (median)")
    ax.set_xlim(0.5, max(len(rows), 1) + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")


def _importance(ax, built) -> None:
    try:
        values = importances(built)
    except (ValueError, RuntimeError) as exc:  # e.g. fewer than two completed trials
        ax.text(0.5, 0.5, f"no importances:\n{str(exc).splitlines()[0][:80]}", ha="center", va="center",
                transform=ax.transAxes, fontsize=8)
        ax.set_axis_off()
        return
    names = list(values)[::-1]
    ax.barh(names, [values[n] for n in names], color="tab:blue")
    for y, n in enumerate(names):
        ax.text(values[n], y, f" {values[n]:.2f}", va="center", fontsize=8)
    ax.set_xlim(0, max(list(values.values()) + [0.01]) * 1.25)
    ax.set_xlabel("parameter importance (Optuna PED-ANOVA)")
    ax.tick_params(axis="y", labelsize=8)


def draw(df: pd.DataFrame, out: str | Path, *, study: str | None = None, grid: pd.DataFrame | None = None,
         svg: bool = False) -> tuple[list[Path], str | None]:
    """One figure per study in the rows (and the comparison table when a grid is given)."""
    import matplotlib.pyplot as plt
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows_all = trials.study_rows(df)
    if study:
        rows_all = rows_all[rows_all["study"].str.contains(study, case=False, regex=False)]
    paths, compared = [], []
    if rows_all.empty:  # no study column, or no row of the named study
        return paths, None
    for name, rows in rows_all.groupby("study", sort=True):
        rows = rows.reset_index(drop=True)
        space = trials.space_from_rows(rows)
        gpu = C.one_value(rows, "gpu_name") or C.one_value(rows, "device")
        timed = bool(rows["timing_meaningful"].fillna(False).astype(bool).any())
        ok = int(_is_result(rows).sum())
        grid_row, points = grid_best(grid, rows) if grid is not None else (None, 0)
        fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.6), gridspec_kw={"width_ratios": [3, 2]})
        _history(left, rows, grid_row, points)
        _importance(right, trials.study_from_rows(rows, space, name=name))
        fig.suptitle(f"study {name}: {len(rows)} configs measured ({ok} correct, {len(rows) - ok} pruned), "
                     f"{len(space)} fields searched\n{gpu}{C.untimed_note(timed)}", fontsize=9)
        fig.tight_layout()
        paths += C.save(fig, out, f"study_{T.slug(name)}", svg)
        if grid is not None:
            compared.append(comparison(name, rows, grid))
    table = None
    if compared:
        table = T.markdown_table(pd.DataFrame(compared))
        Path(out).mkdir(parents=True, exist_ok=True)
        path = Path(out) / "study_comparison.md"
        path.write_text(f"# Tuner vs exhaustive grid\n\n{table}\n")
        paths.append(path)
    return paths, table


if __name__ == "__main__":
    raise SystemExit(main())
