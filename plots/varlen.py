"""TFLOPS vs mean document length, one line per variant: packed varlen batches (solid / dashed) and the uniform
[B, N] batches of the same token count (dotted, same colour, N = the mean document length); one panel per
(tokens, head dim, causal), one figure per GPU and dtype.

    python -m plots.varlen results=<dir or file> [gpu=<substring>] [dtype=bf16] [dist=lognormal] [out=plots/out]
                           [svg=true]

Only correct rows are drawn (status ok and gradients checked against the reference), in the default program order:
`longest_first=true` rows (the heaviest-first schedule, compared in tables) would stack on their variant's line.
TFLOPS count the visible pairs per document (FlashAttention's convention), so packed and uniform points compare on
equal work.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from plots import common as C
from runners import tables as T

PROG = "plots.varlen"
DEFAULTS = {"results": None, "gpu": None, "dtype": "bf16", "dist": "lognormal", "out": "plots/out", "svg": False}


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    df = T.load(T.require(args, "results", PROG))
    paths = draw(df, args["out"], gpu=args["gpu"], dtype=args["dtype"], dist=args["dist"], svg=args["svg"])
    return C.print_paths(paths, f"{PROG}: no correct varlen row (varlen_dist={args['dist']}) in the tables")


def draw(df: pd.DataFrame, out: str | Path, *, gpu: str | None = None, dtype: str | None = "bf16",
         dist: str = "lognormal", svg: bool = False) -> list[Path]:
    if "varlen_dist" not in df.columns or df.empty:
        return []
    df = T.select_dtype(C.kernel_only(df, PROG), dtype, PROG)
    paths = []
    for label in T.select_gpus(df, gpu, PROG) if len(df) else []:
        rows = T.latest(df[df[T.GPU] == label])
        rows = rows[T.is_result(rows) & rows["tflops"].notna() & rows["varlen_dist"].isin([dist, "none"])]
        if "longest_first" in rows.columns:  # the default order only: one point per (variant, batch)
            rows = rows[rows["longest_first"].astype("boolean").fillna(False).eq(False)]
        if not (rows["varlen_dist"] == dist).any():
            continue
        paths += _figure(rows, label, dtype, dist, out, svg)
    return paths


def _figure(rows: pd.DataFrame, gpu: str, dtype, dist: str, out, svg: bool) -> list[Path]:
    packed = rows[rows["varlen_dist"] == dist]
    panels = sorted(set(zip(packed["tokens_total"], packed["head_dim"], packed["causal"])))
    fig, axes = plt.subplots(1, len(panels), figsize=(max(4.5 * len(panels), 9.0), 4.6), sharey=True, squeeze=False,
                             layout="constrained")
    for ax, (tokens, head_dim, causal) in zip(axes[0], panels):
        here = rows[(rows["tokens_total"] == tokens) & (rows["head_dim"] == head_dim) & (rows["causal"] == causal)]
        for variant in T.variant_order(here["variant"].unique()):
            style = C.variant_style(variant)
            for kind, extra, name in ((dist, {}, f"{T.variant_label(variant)}"),
                                      ("none", {"linestyle": ":", "marker": "."}, None)):
                line = here[(here["variant"] == variant) & (here["varlen_dist"] == kind)].sort_values("mean_doc_len")
                if len(line):
                    ax.plot(line["mean_doc_len"], line["tflops"], **{**style, **extra}, label=name)
        C.log2_seq_axis(ax, here["mean_doc_len"].round())
        ax.set_title(f"{int(tokens)} tokens, head_dim={int(head_dim)}, {'causal' if causal else 'non-causal'}",
                     fontsize=10)
        ax.set_xlabel("mean document length (log2)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("backward TFLOPS")
    handles, labels = axes[0][0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="black", linestyle=":", marker="."))
    labels.append("same colour, dotted: uniform batch, seq = mean doc length")
    fig.legend(handles, labels, loc="outside lower center", ncols=min(3, len(labels)), fontsize=8)
    fig.suptitle(f"packed {dist} documents vs uniform batches · {dtype} · {T.FLOP_CONVENTION}, per document"
                 + f"\n{C.gpu_title(rows, gpu)}" + C.untimed_note(bool(rows["timing_meaningful"].all())), fontsize=9)
    return C.save(fig, out, f"varlen_{T.slug(gpu)}_{dtype}_{dist}", svg)


if __name__ == "__main__":
    raise SystemExit(main())
