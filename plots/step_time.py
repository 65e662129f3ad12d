"""Step time by design: the model-step benchmark's rows (runners.model_step, bench_kind=model_step), one bar per
design and compile mode, one panel per model config, one figure per GPU.

    python -m plots.step_time results=<dir or file> [gpu=<substring>] [out=plots/out] [svg=true]

A bar is the median time of one training step (forward, backward, AdamW step), whiskers p20–p80. Its colour is the
design's (as in every figure), its hatch the compile mode (eager plain). The dark part at its foot is the attention
backward's GPU kernel time in that step (``attn_bwd_ms``) and the label above it the attention backward's share of
the step's kernel time (``attn_bwd_share``). A design whose training curve left the baseline's spread (status wrong)
or that failed is an X on the axis, red or grey, never a bar. Kernel rows in the same tables are left out (the
TFLOPS figures draw them).
"""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from plots import common as C
from runners import tables as T

PROG = "plots.step_time"
DEFAULTS = {"results": None, "gpu": None, "out": "plots/out", "svg": False}
MODE_ORDER = ("eager", "default", "reduce-overhead", "max-autotune")
MODE_HATCH = {"eager": "", "default": "..", "reduce-overhead": "//", "max-autotune": "xx"}
PER_MODE = ("variant", "compile_mode")  # what a bar is, within a panel


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    df = T.load(T.require(args, "results", PROG))
    paths = draw(df, args["out"], gpu=args["gpu"], svg=args["svg"])
    return C.print_paths(paths, f"{PROG}: no model-step row (bench_kind=model_step) that is a correct result or a "
                                "failure in the tables")


# ------------------------------------------------------------------------------------------------------ rows
def model_key(config_key: str) -> str:
    """A model-step row's config less what varies within a panel (design, compile mode): the panel's key."""
    key = T.step_join_key(config_key)
    kind, _, body = key.partition("|")
    try:
        config = json.loads(body)
    except ValueError:
        return key
    return kind + "|" + json.dumps({k: v for k, v in config.items() if k not in PER_MODE}, sort_keys=True)


def step_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The newest model-step row of each point, with ``_model`` (the panel key) and ``_mode_rank``."""
    rows = T.latest(T.step_rows(df))
    return rows.assign(_model=[model_key(k) for k in rows["config_key"]],
                       _mode_rank=[mode_rank(m) for m in rows["compile_mode"]])


def panel_order(rows: pd.DataFrame) -> list[str]:
    """The model configs (``_model``) of ``rows``, by head dim, sequence, batch, then label."""
    first = rows.drop_duplicates("_model")
    key = {r["_model"]: (r["head_dim"], r["seq"], r["batch"], T.step_text(r)) for _, r in first.iterrows()}
    return sorted(key, key=key.get)


def mode_rank(mode: str) -> int:
    return MODE_ORDER.index(mode) if mode in MODE_ORDER else len(MODE_ORDER)


def modes(rows: pd.DataFrame) -> list[str]:
    return sorted(rows["compile_mode"].unique(), key=lambda m: (mode_rank(m), m))


def ms_text(row) -> str:
    """'7.23 [6.96–7.87]' (median [p20–p80] of the step ms)."""
    lo, hi = np.nanmin([row["ms_p20"], row["ms"], row["ms_p80"]]), np.nanmax([row["ms_p20"], row["ms"],
                                                                               row["ms_p80"]])
    return f"{row['ms']:.3g} [{lo:.3g}–{hi:.3g}]"


def table(df: pd.DataFrame, fa2: str = "sdpa_flash") -> pd.DataFrame:
    """One row per (GPU, model config, design, mode) that ran: step ms, speed against ``fa2`` in the same mode
    (its ms / this ms, >1 faster), the attention backward's share, the agreement numbers and the status. Only a
    correct row has a step time or a ratio; a wrong one shows its agreement numbers."""
    rows = step_rows(df)
    rows = rows[~rows["status"].isin(("skipped",))]
    out = []
    rank = {k: i for i, k in enumerate(panel_order(rows))} if len(rows) else {}
    for (gpu, _), g in rows.assign(_panel=rows["_model"].map(rank)).groupby([T.GPU, "_panel"], sort=True):
        results = g[T.is_result(g)]
        base = {m: ms for m, ms in zip(results.loc[results["variant"] == fa2, "compile_mode"],
                                        results.loc[results["variant"] == fa2, "ms"])}
        order = {v: i for i, v in enumerate(T.variant_order(g["variant"]))}
        g = g.assign(_v=g["variant"].map(order)).sort_values(["_v", "_mode_rank"], kind="stable")
        for _, r in g.iterrows():
            ok = bool(T.is_result(g.loc[[r.name]]).iloc[0])
            timed = r["status"] in ("ok", "wrong") and pd.notna(r["loss_max_dev"])
            out.append({
                "GPU": gpu, "model": T.step_text(r), "design": r["variant"], "mode": r["compile_mode"],
                "step ms [p20–p80]": ms_text(r) if ok and pd.notna(r["ms"]) else "-",
                f"×{fa2}": f"{base[r['compile_mode']] / r['ms']:.2f}" if ok and r["compile_mode"] in base
                and pd.notna(r["ms"]) else "-",
                "attn bwd share": f"{r['attn_bwd_share']:.0%}" if ok and pd.notna(r["attn_bwd_share"]) else "-",
                "loss dev / spread / tol": (f"{r['loss_max_dev']:.2g} / {r['loss_spread']:.2g} / {r['loss_tol']:.2g}"
                                            if timed else "-"),
                "status": "wrong" if T.is_wrong(g.loc[[r.name]]).iloc[0] else r["status"]})
    return pd.DataFrame(out)


# --------------------------------------------------------------------------------------------------- drawing
def draw(df: pd.DataFrame, out: str | Path, *, gpu: str | None = None, svg: bool = False) -> list[Path]:
    """One figure per GPU with model-step rows to draw; [] when there is none."""
    rows = step_rows(df)
    rows = rows[C.drawable(rows)]
    paths = []
    for label in T.select_gpus(rows, gpu, PROG) if len(rows) else []:
        here = rows[rows[T.GPU] == label]
        here, meaningful = T.timed(here)
        paths += _figure(here, label, meaningful, out, svg)
    return paths


def _figure(rows: pd.DataFrame, gpu: str, meaningful: bool, out, svg: bool) -> list[Path]:
    panels = panel_order(rows)
    ncols = min(2, len(panels))
    nrows = -(-len(panels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(7.2 * ncols, 4.2 * nrows + 1.2), squeeze=False,
                             layout="constrained")
    mode_list = modes(rows)
    for ax, key in zip(axes.flat, panels):
        _panel(ax, rows[rows["_model"] == key], mode_list)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles = [Patch(facecolor="white", edgecolor="black", hatch=MODE_HATCH.get(m, "++"), label=m) for m in mode_list]
    handles.append(Patch(facecolor="black", alpha=0.45, label="attention backward kernels (GPU ms per step)"))
    failed = rows[T.is_failed(rows)]
    for present, color, label in ((T.is_wrong(failed).any(), "red", "wrong: training off the baseline (not a result)"),
                                  ((~T.is_wrong(failed)).any(), "dimgray", "failed: oom / compile / error")):
        if present:
            handles.append(Line2D([], [], linestyle="none", marker="X", markersize=9, markerfacecolor="white",
                                  markeredgecolor=color, label=label))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)
    fig.suptitle(f"Step time by design: forward + backward + AdamW step of the model-step decoder\n"
                 f"{C.gpu_title(rows, gpu)}{C.untimed_note(meaningful)}\n"
                 "label: attention backward's share of the step's kernel time", fontsize=9)
    return C.save(fig, out, f"step_time_{T.slug(gpu)}", svg)


def _panel(ax, rows: pd.DataFrame, mode_list: list[str]) -> None:
    variants = T.variant_order(rows["variant"])
    width = 0.8 / len(mode_list)
    results, failed = rows[T.is_result(rows)], rows[T.is_failed(rows)]
    top = float(results["ms_p80"].max()) if len(results) else 1.0
    for i, variant in enumerate(variants):
        for j, mode in enumerate(mode_list):
            x = i - 0.4 + width * (j + 0.5)
            hit = results[(results["variant"] == variant) & (results["compile_mode"] == mode)]
            if len(hit):
                r = hit.iloc[0]
                lo = np.nanmin([r["ms_p20"], r["ms"], r["ms_p80"]])
                hi = np.nanmax([r["ms_p20"], r["ms"], r["ms_p80"]])
                ax.bar(x, r["ms"], width, color=C.variant_color(variant), edgecolor="black", linewidth=0.5,
                       hatch=MODE_HATCH.get(mode, "++"), alpha=0.85)
                ax.errorbar(x, r["ms"], yerr=[[r["ms"] - lo], [hi - r["ms"]]], color="black", linewidth=0.8,
                            capsize=2)
                if pd.notna(r["attn_bwd_ms"]):
                    ax.bar(x, r["attn_bwd_ms"], width * 0.6, color="black", alpha=0.45)
                if pd.notna(r["attn_bwd_share"]):
                    ax.text(x, hi + 0.01 * top, f"{r['attn_bwd_share']:.0%}", ha="center", va="bottom",
                            fontsize=6, rotation=90)
                continue
            bad = failed[(failed["variant"] == variant) & (failed["compile_mode"] == mode)]
            if len(bad):
                color = "red" if T.is_wrong(bad).any() else "dimgray"
                ax.plot([x], [0], linestyle="none", marker="X", markersize=9, markerfacecolor="white",
                        markeredgecolor=color, clip_on=False, zorder=5)
    ax.set_xticks(range(len(variants)))
    ax.set_xticklabels([T.variant_label(v) for v in variants], rotation=30, ha="right", fontsize=8)
    ax.set_xlim(-0.6, len(variants) - 0.4)
    ax.set_ylim(0, top * 1.18)
    ax.set_ylabel("ms per training step")
    ax.set_title(T.step_text(rows.iloc[0]), fontsize=10)
    ax.grid(True, axis="y", alpha=0.3)


if __name__ == "__main__":
    raise SystemExit(main())
