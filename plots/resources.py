"""Why a point is as fast as it is: per-kernel time shares and compiled resources (runners/point/profile.py columns).

    python -m plots.resources results=<dir or file> [gpu=<substring>] [dtype=bf16] [variant=<name>]
                              [out=plots/out] [svg=true]

Draws, for a ``sweep=blocks`` run, TFLOPS against the registers per thread of each Triton kernel of the design
(one figure per GPU × variant × shape, one panel per kernel): colour = resident programs per SM, a red ring
and its count = spilled registers. Only correct results with meaningful timings are drawn, and only shapes with
two or more configs that carry compiled resources. ``section(df)`` is the report's resources section: for each
variant's fastest correct config per shape, the kernels' share of the backward and their resources.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from plots import common as C
from runners import tables as T

PROG = "plots.resources"
DEFAULTS = {"results": None, "gpu": None, "dtype": "bf16", "variant": None, "out": "plots/out", "svg": False}
MAX_KERNELS_SHOWN = 4


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    df = T.load(T.require(args, "results", PROG))
    paths = draw(df, args["out"], gpu=args["gpu"], dtype=args["dtype"], variant=args["variant"], svg=args["svg"])
    return C.print_paths(paths, f"{PROG}: no block search with compiled resources (resources_json) in the tables")


# ------------------------------------------------------------------------------------------------ parsing


def kernel_shares(row) -> str:
    """'_dkdv_kernel 62% · _dq_kernel 33% · …' of a row's kernel_ms (largest first)."""
    kernels = C.json_dict(row.get("kernel_ms"))
    total = sum(kernels.values())
    if not kernels or total <= 0:
        return "-"
    items = sorted(kernels.items(), key=lambda kv: -kv[1])
    text = [f"{name} {100 * ms / total:.0f}%" for name, ms in items[:MAX_KERNELS_SHOWN]]
    if len(items) > MAX_KERNELS_SHOWN:
        text.append(f"+{len(items) - MAX_KERNELS_SHOWN} more")
    return " · ".join(text)


def resources_text(row) -> str:
    """'_dkdv_kernel 232 regs, 8 spills, 96 KB, 1/SM (regs) · …' of a row's resources_json."""
    res = C.json_dict(row.get("resources_json"))
    parts = []
    for name, r in sorted(res.items(), key=lambda kv: kv[0]):
        smem = r.get("smem_bytes")
        programs = r.get("programs_per_sm")
        parts.append(f"{name} {r.get('n_regs', '?')} regs, {r.get('n_spills', '?')} spills, "
                     f"{'?' if smem is None else f'{smem / 1024:.0f} KB'}, w{r.get('num_warps', '?')} "
                     f"s{r.get('num_stages', '?')}, {'?' if programs is None else programs}/SM"
                     + (f" ({r['limiter']})" if r.get("limiter") else ""))
    return " · ".join(parts) or "-"


# ----------------------------------------------------------------------------------------------- report
def section(df: pd.DataFrame) -> str:
    """The report's resources section (Markdown); model-step rows are left out (their kernels are a whole step's)."""
    rows = T.latest(T.kernel_rows(df))
    rows = rows[rows["timing_meaningful"] & T.is_result(rows)]
    explained = rows[(rows["kernel_ms"] != "") | (rows["resources_json"] != "")]
    if explained.empty:
        return ("_(no per-kernel data: the rows predate runners/point/profile.py, or come from the CPU interpreter, "
                "where there are no CUDA kernels)_\n")
    best = T.best_config(explained)
    parts = ["For each variant's fastest correct config per shape: each kernel's share of the GPU time of one "
             "backward (PyTorch profiler, a few calls after the timing), how much of the timed `ms` the kernels "
             "cover, and each Triton kernel's registers per thread, spilled registers, shared memory, warps, "
             "stages and resident programs per SM (what limits them).\n"]
    for (gpu, dtype), g in best.groupby([T.GPU, "dtype"], sort=True):
        g = g.sort_values(["seq", "head_dim", "causal", "variant"], kind="stable")
        table = pd.DataFrame({
            "variant": g["variant"], "shape": [T.shape_text(r) for _, r in g.iterrows()],
            "TFLOPS": [f"{t:.1f}" for t in g["tflops"]],
            "kernels / ms": [f"{s / m:.0%}" if pd.notna(s) and m > 0 else "-"
                             for s, m in zip(g["kernel_ms_sum"], g["ms"])],
            "kernel shares": [kernel_shares(r) for _, r in g.iterrows()],
            "Triton kernels": [resources_text(r) for _, r in g.iterrows()]})
        parts += [f"### {gpu} — {dtype}\n", T.markdown_table(table)]
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------------- figures
def draw(df: pd.DataFrame, out: str | Path, *, gpu: str | None = None, dtype: str | None = "bf16",
         variant: str | None = None, svg: bool = False) -> list[Path]:
    """Registers/spills vs TFLOPS figures of the block searches in the tables; [] when there is none."""
    paths = []
    for label, rows in C.per_gpu(df, PROG, dtype=dtype, gpu=gpu, variant=variant):
        rows = T.latest(rows)
        rows = rows[rows["timing_meaningful"] & T.is_result(rows) & (rows["resources_json"] != "")]
        for v in T.variant_order(rows["variant"]):
            mine = rows[rows["variant"] == v]
            for _, g in mine.groupby(list(T.SHAPE_COLUMNS), sort=True, dropna=False):
                if len(g) >= 2:
                    paths += _figure(g, v, label, dtype, out, svg)
    return paths


def _figure(rows: pd.DataFrame, variant: str, gpu: str, dtype, out, svg) -> list[Path]:
    per_kernel = {}  # kernel -> list of (n_regs, n_spills, programs per SM, TFLOPS)
    for _, r in rows.iterrows():
        for name, res in C.json_dict(r["resources_json"]).items():
            if res.get("n_regs") is not None:
                per_kernel.setdefault(name, []).append((res["n_regs"], res.get("n_spills") or 0,
                                                        res.get("programs_per_sm"), r["tflops"]))
    if not per_kernel:
        return []
    time = {}  # kernels with the most GPU time first
    for _, r in rows.iterrows():
        for name, ms in C.json_dict(r["kernel_ms"]).items():
            time[name] = time.get(name, 0.0) + ms
    names = sorted(per_kernel, key=lambda n: (-time.get(n, 0.0), -len(per_kernel[n]), n))[:3]
    fig, axes = plt.subplots(1, len(names), figsize=(4.6 * len(names) + 0.8, 4.4), squeeze=False, sharey=True,
                             layout="constrained")
    scatter = None
    vmax = max((p for n in names for _, _, p, _ in per_kernel[n] if p is not None), default=1)
    for ax, name in zip(axes[0], names):
        points = pd.DataFrame(per_kernel[name], columns=["regs", "spills", "programs", "tflops"])
        scatter = ax.scatter(points["regs"], points["tflops"], c=points["programs"].fillna(0), cmap="viridis",
                             vmin=0, vmax=vmax, s=36, zorder=3)
        spilled = points[points["spills"] > 0]
        ax.scatter(spilled["regs"], spilled["tflops"], s=130, facecolors="none", edgecolors="red", linewidths=1.4,
                   zorder=4, label="spills registers" if len(spilled) else None)
        for _, p in spilled.iterrows():
            ax.annotate(f"{int(p['spills'])}", (p["regs"], p["tflops"]), textcoords="offset points", xytext=(6, 4),
                        fontsize=7, color="red")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("registers per thread")
        ax.grid(True, alpha=0.3)
        if len(spilled):
            ax.legend(fontsize=8, loc="lower left")
    axes[0][0].set_ylabel("TFLOPS (correct results)")
    if scatter is not None:
        fig.colorbar(scatter, ax=axes[0].tolist(), label="resident programs per SM")
    shape = T.shape_text(rows.iloc[0])
    fig.suptitle(f"{variant}: registers / spills vs TFLOPS — {shape} {dtype} ({len(rows)} configs)\n"
                 f"{C.gpu_title(rows, gpu)} · {T.FLOP_CONVENTION}", fontsize=10)
    stem = f"resources_{variant}_{T.slug(gpu)}-{T.slug(shape)}_{dtype}"
    return C.save(fig, out, stem, svg)


if __name__ == "__main__":
    raise SystemExit(main())
