"""Cross-GPU view: each variant's TFLOPS and % of peak on every GPU in the tables (grouped bars).

    python -m plots.cross_gpu results=<dir or file> [dtype=bf16] [gpu=<substring>] [causal=<true|false>]
                              [head_dim=<int>] [out=plots/out] [svg=true]

Per variant and GPU, the bar is the geometric mean over the shapes (batch, heads, seq, head_dim, causal, ...)
that variant has a correct result for on *every* GPU drawn, each shape at its fastest correct block config
on that GPU (block defaults differ per GPU, so shapes are matched, not config keys). Whiskers on the TFLOPS
bars span the geometric means of p20 and p80. % of peak uses ``pct_peak`` (else tflops / the GPU's dense peak for the dtype).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from plots import common as C
from runners import tables as T

PROG = "plots.cross_gpu"
DEFAULTS = {"results": None, "gpu": None, "dtype": "bf16", "causal": None, "head_dim": None, "out": "plots/out",
            "svg": False}
GPU_COLORS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    df = T.load(T.require(args, "results", PROG))
    causal = None if args["causal"] is None else T.coerce(PROG, "causal", args["causal"], True)
    paths = draw(df, args["out"], gpu=args["gpu"], dtype=args["dtype"], causal=causal,
                 head_dim=args["head_dim"], svg=args["svg"])
    return C.print_paths(paths, f"{PROG}: no variant has a correct timed result on every GPU")


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per variant × GPU: geomean TFLOPS (p20, p80) and % of peak over the shapes common to all GPUs."""
    rows = T.latest(df)
    rows = rows[rows["timing_meaningful"]]
    results = T.best_config(rows[T.is_result(rows)])
    results = results.assign(_pct=T.pct_peak(results))
    gpus = sorted(rows[T.GPU].unique())
    out = []
    for v in T.variant_order(results["variant"]):
        mine = results[results["variant"] == v]
        keys = T.row_keys(mine, T.SHAPE_COLUMNS)
        per_gpu = {g: set(keys[mine[T.GPU] == g]) for g in gpus}
        common = set.intersection(*per_gpu.values()) if per_gpu else set()
        if not common:
            continue
        shared = mine[keys.isin(common)]
        for g in gpus:
            sub = shared[shared[T.GPU] == g]
            peak = sub[T.PEAK].median()
            out.append({"variant": v, "gpu": g, "shapes": len(common), "tflops": T.geomean(sub["tflops"]),
                        "tflops_p20": T.geomean(sub["tflops_p20"]), "tflops_p80": T.geomean(sub["tflops_p80"]),
                        "pct_peak": T.geomean(sub["_pct"]), "peak_tflops": peak})
    return pd.DataFrame(out, columns=["variant", "gpu", "shapes", "tflops", "tflops_p20", "tflops_p80",
                                      "pct_peak", "peak_tflops"])


def draw(df: pd.DataFrame, out: str | Path, *, gpu: str | None = None, dtype: str | None = "bf16",
         causal: bool | None = None, head_dim=None, svg: bool = False) -> list[Path]:
    df = T.select_dtype(C.kernel_only(df, PROG), dtype, PROG)
    gpus = T.select_gpus(df, gpu, PROG)
    df = df[df[T.GPU].isin(gpus)]
    scope = []
    if causal is not None:
        df = df[df["causal"] == bool(causal)]
        scope.append("causal" if causal else "non-causal")
    if head_dim is not None:
        df = df[df["head_dim"] == int(head_dim)]
        scope.append(f"head_dim={int(head_dim)}")
    table = summary(df)
    if table.empty:
        return []
    variants = list(dict.fromkeys(table["variant"]))
    gpus = sorted(table["gpu"].unique())
    fig, (ax_t, ax_p) = plt.subplots(2, 1, figsize=(max(7.0, 1.3 * len(variants) * max(1, len(gpus)) / 1.6 + 3),
                                                    8.2), sharex=True, layout="constrained")
    width = 0.8 / len(gpus)
    x = np.arange(len(variants))
    for k, g in enumerate(gpus):
        sub = table[table["gpu"] == g].set_index("variant").reindex(variants)
        pos = x - 0.4 + width * (k + 0.5)
        peak = sub["peak_tflops"].median()
        label = g + (f" (peak {peak:.0f})" if pd.notna(peak) else "")
        color = GPU_COLORS[k % len(GPU_COLORS)]
        err = np.vstack([(sub["tflops"] - sub["tflops_p20"]).clip(lower=0).fillna(0),
                         (sub["tflops_p80"] - sub["tflops"]).clip(lower=0).fillna(0)])
        bars = ax_t.bar(pos, sub["tflops"], width, label=label, color=color, yerr=err, capsize=2,
                        error_kw={"linewidth": 0.8})
        ax_t.bar_label(bars, labels=[f"{t:.0f}" if pd.notna(t) else "" for t in sub["tflops"]], fontsize=7,
                       padding=2)
        bars = ax_p.bar(pos, sub["pct_peak"].fillna(0), width, color=color)
        ax_p.bar_label(bars, labels=[f"{p:.0f}%" if pd.notna(p) else "n/a" for p in sub["pct_peak"]], fontsize=7,
                       padding=2)
    shapes = table.drop_duplicates("variant").set_index("variant")["shapes"]
    ax_p.set_xticks(x, [f"{T.variant_label(v)}\n({shapes[v]} shapes)" for v in variants], fontsize=8)
    ax_t.set_ylabel("backward TFLOPS (geomean)")
    ax_p.set_ylabel("% of GPU dense peak (geomean)")
    for ax in (ax_t, ax_p):
        ax.grid(True, axis="y", alpha=0.3)
        ax.margins(y=0.15)
    ax_t.legend(fontsize=8, loc="upper left", frameon=False)
    where = ", ".join(scope) if scope else "all shapes"
    fig.suptitle(f"Cross-GPU: backward TFLOPS and % of peak per variant — {dtype or 'all dtypes'}, {where}\n"
                 f"geomean over shapes correct on every GPU, fastest correct block config per GPU · whiskers p20–p80"
                 f"\n{T.FLOP_CONVENTION}", fontsize=10)
    stem = f"cross_gpu_{dtype or 'all'}" + ("_" + T.slug("_".join(scope)) if scope else "")
    return C.save(fig, out, stem, svg)


if __name__ == "__main__":
    raise SystemExit(main())
