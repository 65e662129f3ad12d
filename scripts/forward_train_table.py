"""The forward / train / backward table of issues 42 and 43 from runner rows (ws beside cuDNN and FA4): one line
per (dtype, timed, shape, causal), TFLOPS and ws's ratios, then each (dtype, timed)'s range. A shape is B, H / Hkv,
D and N, so a file with GQA cells beside the FA grid's keeps them apart; a baseline a cell lacks shows as –.

    python scripts/forward_train_table.py results/h200/forward_train/h200_forward_train.parquet
"""
import sys

import pandas as pd

from runners.tables import markdown_table

DESIGN, BASELINES = "ws", {"sdpa_cudnn": "cuDNN", "fa4": "FA4"}
SHAPE = ["dtype", "timed", "batch", "heads", "kv_heads", "head_dim", "seq", "causal"]


def _number(value: float, digits: int) -> str:
    return "–" if pd.isna(value) else f"{value:.{digits}f}"


def table(rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (dtype, timed, batch, heads, kv_heads, head_dim, seq, causal), g in rows.groupby(SHAPE):
        tflops = g.groupby("variant")["tflops"].max()
        ours = tflops.get(DESIGN, float("nan"))
        line = {"dtype": dtype, "timed": timed, "B": batch, "H / Hkv": f"{heads} / {kv_heads}", "D": head_dim,
                "N": seq, "causal": "yes" if causal else "no", DESIGN: _number(ours, 1),
                f"{DESIGN}'s forward": "/".join(sorted(g.loc[g.variant == DESIGN, "forward_ran"].astype(str).unique()))}
        line.update({title: _number(tflops.get(name, float("nan")), 1) for name, title in BASELINES.items()})
        line.update({f"{DESIGN} / {title}": _number(ours / tflops.get(name, float("nan")), 2)
                     for name, title in BASELINES.items()})
        out.append(line)
    return pd.DataFrame(out)


def ranges(t: pd.DataFrame) -> list[str]:
    """Per (dtype, timed): the range of ws's ratio to each baseline over the cells that have both."""
    lines = []
    for (dtype, timed), g in t.groupby(["dtype", "timed"]):
        parts = []
        for title in BASELINES.values():
            ratio = pd.to_numeric(g[f"{DESIGN} / {title}"], errors="coerce").dropna()
            parts.append(f"× {title} " + (f"{ratio.min():.2f}–{ratio.max():.2f}" if len(ratio) else "–"))
        lines.append(f"{dtype} {timed}: {', '.join(parts)}")
    return lines


def main(path: str) -> None:
    rows = pd.read_parquet(path)
    rows = rows[(rows["status"] == "ok") & rows["correct"].astype(bool)]
    t = table(rows)
    print(markdown_table(t))
    print("\n".join(ranges(t)))


if __name__ == "__main__":
    main(sys.argv[1])
