"""The forward / train table of issue 42 from runner rows (timed=forward,train; ws beside cuDNN and FA4):
one line per (dtype, timed, D, N, causal), TFLOPS and ws's ratios, then each (dtype, timed)'s range.

    python scripts/forward_train_table.py results/h200/forward_train/h200_forward_train.parquet
"""
import sys

import pandas as pd

from runners.tables import markdown_table

DESIGN, BASELINES = "ws", {"sdpa_cudnn": "cuDNN", "fa4": "FA4"}


def table(rows: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (dtype, timed, head_dim, seq, causal), g in rows.groupby(["dtype", "timed", "head_dim", "seq", "causal"]):
        tflops = g.set_index("variant")["tflops"]
        line = {"dtype": dtype, "timed": timed, "D": head_dim, "N": seq, "causal": "yes" if causal else "no",
                f"{DESIGN} (its forward: {'/'.join(sorted(g.loc[g.variant == DESIGN, 'forward_ran'].unique()))})":
                    f"{tflops[DESIGN]:.1f}"}
        line.update({title: f"{tflops[name]:.1f}" for name, title in BASELINES.items()})
        line.update({f"{DESIGN} / {title}": f"{tflops[DESIGN] / tflops[name]:.2f}" for name, title in BASELINES.items()})
        out.append(line)
    return pd.DataFrame(out)


def main(path: str) -> None:
    rows = pd.read_parquet(path)
    rows = rows[(rows["status"] == "ok") & rows["correct"].astype(bool)]
    t = table(rows)
    print(markdown_table(t))
    for (dtype, timed), g in t.groupby(["dtype", "timed"]):
        ranges = ", ".join(f"× {title} {g[f'{DESIGN} / {title}'].astype(float).min():.2f}–"
                           f"{g[f'{DESIGN} / {title}'].astype(float).max():.2f}" for title in BASELINES.values())
        print(f"{dtype} {timed}: {ranges}")


if __name__ == "__main__":
    main(sys.argv[1])
