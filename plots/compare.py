"""TFLOPS vs sequence length, one line per variant, faceted by head dim × causal; one figure per GPU.

    python -m plots.compare results=<dir or file> [gpu=<substring>] [dtype=bf16] [out=plots/out] [svg=true]
                            [batch=<int>] [heads=<int>] [modifiers='window=1024,0 softcap=30']
                            [timed=backward|forward|train]

Each line is a variant's fastest correct block config at each point (median TFLOPS, band = p20–p80). Red X
markers at the foot of a panel are points whose gradients were wrong; grey X markers are points that failed
(oom, compile_error, resources, error). Neither is ever drawn as a result. The dashed black line is the GPU's
dense peak for the dtype (``peak_tflops_<dtype>``, else ``peak_tflops`` for bf16/fp16) when the table
knows it. ``timed=`` picks the rows of one timed kind (the sweep's `timed` key, issue 42): the backward alone (the
default, and every row before issue 42), the forward alone, or the training pass (forward + backward in one call).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.transforms import blended_transform_factory

from plots import common as C
from runners import tables as T

PROG = "plots.compare"
DEFAULTS = {"results": None, "gpu": None, "dtype": "bf16", "out": "plots/out", "svg": False, "batch": None,
            "heads": None, "modifiers": None,  # modifiers: the rows' `modifiers` text ('' = plain attention)
            "timed": "backward"}  # backward | forward | train: which kind of row is drawn
KIND_TITLE = {"backward": "backward", "forward": "forward", "train": "forward + backward"}
# what else must match for one line to be one shape (a windowed row is never a point of the plain line); the batch,
# or the tokens B·Nq, and Nk are held fixed too (shape_families)
FAMILY = ("heads", "kv_heads", "layout", "modifiers")


@T.cli
def main(argv: list[str] | None = None) -> int:
    args = T.parse_args(argv, DEFAULTS, PROG, __doc__)
    df = T.load(T.require(args, "results", PROG))
    paths = draw(df, args["out"], gpu=args["gpu"], dtype=args["dtype"], svg=args["svg"], batch=args["batch"],
                 heads=args["heads"], modifiers=args["modifiers"], timed=args["timed"])
    for p in paths:
        print(p)
    return 0


def draw(df: pd.DataFrame, out: str | Path, *, gpu: str | None = None, dtype: str | None = "bf16",
         svg: bool = False, batch=None, heads=None, modifiers: str | None = None,
         timed: str = "backward") -> list[Path]:
    """One figure per selected GPU; returns the written paths. A GPU with nothing drawable (only skipped or
    unsupported rows, or correct rows without TFLOPS) gets no figure; none at all is a UsageError."""
    df = C.kernel_only(df, PROG, timed)
    everything = df
    df = T.select_shape(T.select_dtype(df, dtype, PROG), batch, heads)
    if modifiers is not None:
        df = df[df["modifiers"] == str(modifiers).strip()]
    if df.empty:
        raise T.UsageError(f"{PROG}: no rows left after the batch=/heads=/modifiers= filters")
    paths, seen = [], []
    for label in T.select_gpus(df, gpu, PROG):
        rows = T.latest(df[df[T.GPU] == label])
        seen.append(rows)
        paths += _figure(rows, label, dtype, out, svg, timed)
    if not paths:
        raise C.nothing_to_draw(PROG, pd.concat(seen), dtype=dtype, everything=everything)
    return paths


def shape_families(rows: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """The two shape families each row can belong to in its (head_dim, causal) panel, as keys: the dims that stay
    fixed along one line. Heads, KV heads, Nk (= Nq, or one fixed Nk), layout and modifiers always; then the batch
    (a sweep over Nq at B=4) or the tokens B·Nq (FlashAttention's grid: B16 N1k, B4 N4k, B1 N16k)."""
    nk = rows["seq_k"].where(rows["seq_k"] != rows["seq"], -1)  # -1: Nk = Nq
    fixed = T.row_keys(rows.assign(_nk=nk), ("head_dim", "causal", *FAMILY, "_nk"))
    return fixed + "|B=" + T.text(rows["batch"]), fixed + "|BN=" + T.text(rows["batch"] * rows["seq"])


def pick_family(rows: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """One shape family per (head_dim, causal) panel, so that a line never joins two shapes: of the families of
    shape_families, the one with the most sequence lengths (then the most drawable rows; the batch before the tokens).
    Returns its rows, with a `family` column naming its fixed dims (the panel's subtitle), and a note counting the
    shapes left out."""
    if rows.empty:
        return rows.assign(family=pd.Series(dtype=object)), []
    by_batch, by_tokens = shape_families(rows)
    shown = rows[C.drawable(rows)] if C.drawable(rows).any() else rows
    candidates = pd.concat([shown.assign(_key=by_batch[shown.index], _kind=0),
                            shown.assign(_key=by_tokens[shown.index], _kind=1)])
    sizes = candidates.groupby(["head_dim", "causal", "_key", "_kind"]).agg(
        n_seq=("seq", "nunique"), n=("seq", "size")).reset_index()
    sizes = sizes.sort_values(["n_seq", "n", "_kind", "_key"], ascending=[False, False, True, True])
    keep = set(sizes.drop_duplicates(["head_dim", "causal"])["_key"])
    key = by_batch.where(by_batch.isin(keep), by_tokens)
    in_family = key.isin(keep)
    left_out = shown[~in_family[shown.index]]
    notes = []
    if len(left_out):
        n_shapes = len(left_out[list(T.SHAPE_COLUMNS)].drop_duplicates())
        notes.append(f"{n_shapes} other shape(s) left out: one shape family per panel "
                     "(choose with batch=/heads=/modifiers=)")
    rows, key = rows[in_family], key[in_family]
    labels = {k: family_text(rows[key == k]) for k in set(key)}
    return rows.assign(family=key.map(labels)), notes


def family_text(rows: pd.DataFrame) -> str:
    """'B=4, H=16' or 'B·Nq=16k tokens, H=16' (plus KV heads, Nk, layout and modifiers where they say something):
    the fixed dims of one shape family."""
    batches = sorted(rows["batch"].dropna().unique())
    if len(batches) == 1:
        parts = [f"B={int(batches[0])}"]
    else:
        parts = [f"B·Nq={C.seq_label(float((rows['batch'] * rows['seq']).iloc[0]))} tokens"]
    heads, kv = rows["heads"].iloc[0], rows["kv_heads"].iloc[0]
    parts.append(f"H={int(heads)}" if pd.notna(heads) else "H=?")
    if pd.notna(kv) and kv != heads:
        parts.append(f"KV heads={int(kv)}")
    if (rows["seq_k"] != rows["seq"]).any():
        parts.append(f"Nk={C.seq_label(float(rows['seq_k'].iloc[0]))}")
    layout = rows["layout"].iloc[0]
    if layout and layout != "bnhd":
        parts.append(f"layout {layout}")
    if rows["modifiers"].iloc[0]:
        parts.append(rows["modifiers"].iloc[0])
    return ", ".join(parts)


def _figure(rows: pd.DataFrame, gpu: str, dtype: str | None, out, svg: bool, timed: str = "backward") -> list[Path]:
    rows, meaningful = T.timed(rows)
    rows, notes = pick_family(rows)
    results = T.best_config(rows[T.is_result(rows)])
    failed = C.uncovered_failures(rows[T.is_failed(rows)], results)  # marked only where no config gave a result
    if results.empty and failed.empty:
        return []  # nothing but skipped / unsupported rows (or results without TFLOPS): no empty figure
    variants = T.variant_order(rows["variant"])
    fig, ncols, cells = C.seq_panels(rows, extra_height=1.6)
    peak = rows[T.PEAK].median()
    multi_configs = (rows[T.is_result(rows)].groupby(["variant", "seq", "head_dim", "causal"]).size() > 1).any()
    for ax, hd, causal, is_bottom, is_left in cells:
        panel, fails = C.in_panel(results, hd, causal), C.in_panel(failed, hd, causal)
        for v in variants:
            line = panel[panel["variant"] == v].sort_values("seq")
            if line.empty:
                continue
            style = C.variant_style(v)
            ax.plot(line["seq"], line["tflops"], label=T.variant_label(v), **style)
            band = line.dropna(subset=["tflops_p20", "tflops_p80"])
            if len(band):
                ax.fill_between(band["seq"], band["tflops_p20"], band["tflops_p80"], color=style["color"],
                                alpha=0.15, linewidth=0)
        draw_failures(ax, fails, variants)
        if pd.notna(peak):
            ax.axhline(peak, color="black", linestyle="--", linewidth=1.0)
        C.finish_seq_panel(ax, C.in_panel(rows, hd, causal), hd, causal, is_bottom, is_left,
                           f"{timed} TFLOPS")
        ax.set_ylim(bottom=0)
    handles = [Line2D([], [], label=T.variant_label(v), **C.variant_style(v)) for v in variants
               if (results["variant"] == v).any()]
    if pd.notna(peak):
        handles.append(Line2D([], [], color="black", linestyle="--", label=f"GPU dense {dtype or ''} peak ({peak:.0f})"))
    handles += C.failure_handles(failed)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 3 if ncols < 3 else 5),
               fontsize=9, frameon=False)
    how = "fastest correct block config per point" if multi_configs else "median"
    kind = KIND_TITLE[timed]
    lines = [f"FlashAttention {kind} TFLOPS — {gpu}, {dtype or 'all dtypes'}{C.untimed_note(meaningful)}",
             C.gpu_title(rows, gpu), f"{T.FLOP_CONVENTION} · {how}, band = p20–p80", *notes]
    fig.suptitle("\n".join(lines), fontsize=10)
    stem = f"compare_{T.slug(gpu)}_{dtype or 'all'}" + ("" if timed == "backward" else f"_{timed}")
    return C.save(fig, out, stem, svg)


def draw_failures(ax, fails: pd.DataFrame, variants: list[str]) -> None:
    """X markers sitting on the x axis (no throughput), each labelled '<variant> <status>' — never a data point."""
    if fails.empty:
        return
    trans = blended_transform_factory(ax.transData, ax.transAxes)
    fails = fails.assign(_k=[variants.index(v) for v in fails["variant"]]).sort_values(["seq", "_k"])
    for seq, group in fails.groupby("seq", sort=False):
        for slot, ((_, r), wrong) in enumerate(zip(group.iterrows(), T.is_wrong(group))):
            x = seq * 2 ** (0.16 * (slot - (len(group) - 1) / 2))  # spread markers that share a seq
            color = "red" if wrong else "dimgray"
            ax.plot([x], [0.0], transform=trans, linestyle="none", marker="X", markersize=9,
                    markerfacecolor=C.variant_color(r["variant"]), markeredgecolor=color, markeredgewidth=1.6,
                    clip_on=False, zorder=5)
            ax.text(x, 0.05, f"{r['variant']} {r['status'] if not wrong else 'WRONG'}", transform=trans,
                    rotation=90, ha="center", va="bottom", fontsize=7, color=color, zorder=6,
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})


if __name__ == "__main__":
    raise SystemExit(main())
