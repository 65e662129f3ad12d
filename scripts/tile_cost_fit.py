"""Where a backward's main kernel spends its time, from grid rows alone: each design's main-kernel time over the
sequence lengths of one (head dim, causal) fitted as (steps x a + tiles x b) / SMs, so a is an SM's time per step
(one BLOCK_M x BLOCK_N tile of S) and b its time per tile (a key block's prologue, pipeline fill and dK / dV
epilogue), the same tile counted for every design (issue 43's lead; results/h100/NOTES.md, 2026-11-27).

    python scripts/tile_cost_fit.py results/h100/fa4/38e8bad/h100_gluon_grid_bf16_38e8bad.parquet
    python scripts/tile_cost_fit.py ROWS --designs ws,fa4 --tiles 64=128x128,128=64x128

Rows: `runners.sweep` rows with `kernel_ms` (the longest kernel is the main one), dense, self-attention (Nq = Nk),
B x N and H x D of the FA grid or any. At least three lengths per (design, head dim, causal) for a fit with a
residual; two give an exact solve. A lead, not a profile: the two costs trade off where few lengths are measured.
"""
import argparse
import json
import sys

import os

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from runners.tables.results import load as load_rows  # noqa: E402

DEFAULT_TILES = {64: (128, 128), 128: (64, 128)}  # head dim -> (BLOCK_M, BLOCK_N): ws's and FA4's causal tiles


def tile_counts(seq: int, block_m: int, block_n: int, causal: bool) -> tuple[int, int]:
    """(steps, tiles) of one (batch, head): tiles = key blocks; steps = the query blocks each walks (causal: from
    the block holding its first key's diagonal, as ws and FA4 walk them)."""
    key_blocks = -(-seq // block_n)
    steps = 0
    for j in range(key_blocks):
        first = (j * block_n) // block_m * block_m if causal else 0
        steps += -(-(seq - first) // block_m)
    return steps, key_blocks


def fit(rows: pd.DataFrame, tiles: dict, sms: int) -> pd.DataFrame:
    """One line per (design, head dim, causal): µs of an SM per step and per tile, and the largest residual (ms)."""
    out = []
    for (variant, head_dim, causal), group in rows.groupby(["variant", "head_dim", "causal"]):
        if head_dim not in tiles or group["seq"].nunique() < 2:
            continue
        block_m, block_n = tiles[head_dim]
        design, measured = [], []
        for row in group.itertuples():
            steps, key_blocks = tile_counts(row.seq, block_m, block_n, bool(causal))
            heads = row.batch * row.heads
            design.append((steps * heads / sms, key_blocks * heads / sms))
            measured.append(max(json.loads(row.kernel_ms).values()))
        a, b = np.linalg.lstsq(np.array(design), np.array(measured), rcond=None)[0]
        residual = np.abs(np.array(design) @ (a, b) - np.array(measured)).max()
        out.append(dict(variant=variant, head_dim=head_dim, causal=bool(causal), lengths=group["seq"].nunique(),
                        step_us=a * 1e3, tile_us=b * 1e3, max_residual_ms=residual))
    return pd.DataFrame(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rows", help="a parquet of runners.sweep rows, or a folder of them")
    parser.add_argument("--designs", default="", help="comma list of variants (default: every one with kernel_ms)")
    parser.add_argument("--tiles", default="", help="HEAD_DIM=BMxBN,... (default 64=128x128,128=64x128)")
    parser.add_argument("--sms", type=int, default=0, help="SMs (default: the rows' sm_count, else 132)")
    args = parser.parse_args(argv)
    rows = load_rows(args.rows)  # a parquet or a folder of them, through the rows' one reader
    rows = rows[(rows["status"] == "ok") & rows["kernel_ms"].notna() & (rows["seq"] == rows["seq_k"])]
    if args.designs:
        rows = rows[rows["variant"].isin(args.designs.split(","))]
    tiles = dict(DEFAULT_TILES)
    for item in filter(None, args.tiles.split(",")):
        head_dim, _, size = item.partition("=")
        block_m, _, block_n = size.partition("x")
        tiles[int(head_dim)] = (int(block_m), int(block_n))
    sms = args.sms
    if not sms:
        counts = rows["sm_count"].dropna() if "sm_count" in rows else []
        sms = int(counts.iloc[0]) if len(counts) else 132
    table = fit(rows, tiles, sms)
    if table.empty:
        print("no (design, head dim, causal) with two or more lengths and kernel times", file=sys.stderr)
        return 1
    print(f"µs of one SM ({sms} SMs) per step and per tile; tiles {tiles}")
    print(table.round(3).to_string(index=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
