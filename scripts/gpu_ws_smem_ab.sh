#!/usr/bin/env bash
# ws's shared-memory levers on one sm90 GPU (results/h100/gluon/frontier_probe.md, proposals 2 and 3): runners.sweep
# rows (accuracy-gated) of ws, bf16, B4 H16 N4096 and B1 H16 N16384, causal and not,
#   D64 (BLOCK_M 128, swap_ab=false): blocks.ds_layout = swz128 (the default), swz64, transposed (P / dS's layout)
#   D128 (swap AB): blocks.stats_pairs = false (the default), true (LSE / delta as one tile of 64-bit pairs)
# into ONE flat table $OUT/<gpu>_ws_smem_ab.parquet (+ .log), then the per-cell table (TFLOPS per value, / default).
#
#   FLASH_BWD_COMMIT=$(git rev-parse HEAD) OUT=... bash scripts/gpu_ws_smem_ab.sh ab     # about 4-6 min cold
#   bash scripts/gpu_ws_smem_ab.sh tests             # their GPU tests (tests/test_ws_smem_levers.py)
#   bash scripts/gpu_ws_smem_ab.sh table TABLE...    # no GPU: the per-cell table of merged tables
#
# The CPU compile (registers, spills, smem, the shared-memory instructions per step): scripts/ws_smem_probe.py --both.
# Copy the table to results/<gpu>/gluon/ab_issue43/ws_smem/ and commit.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
PART=${1:?usage: gpu_ws_smem_ab.sh ab | tests | table TABLE...}
GPU=$(python -c "import torch; n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''; \
print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')" 2>/dev/null || echo gpu)
# the rows' commit: a copy of the tree without .git records this (tests/test_code_version.py)
export FLASH_BWD_COMMIT=${FLASH_BWD_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
export PREFIX=${GPU}_ws_smem SWEEP_ID=ws_smem SWEEP_TIMEOUT_S=${SWEEP_TIMEOUT_S:-600}
export SCRATCH=${TMPDIR:-/tmp}/flash_bwd_ws_smem/$PART
COMMON=(variant=ws heads=16 causal=false,true dtype=bf16)
mkdir -p "$OUT" "$SCRATCH"
# shellcheck source=scripts/sweep_parts.sh
source "$(dirname "$0")/sweep_parts.sh"

table() {  # $@: merged tables -> per (D, B, N, causal): TFLOPS per lever value and its ratio to the default
  python - "$@" <<'PY'
import json
import sys

import pandas as pd

from runners import tables as T

df = pd.concat([T.load(path) for path in sys.argv[1:]], ignore_index=True)
ok = df[T.is_result(df) & df["timing_meaningful"].astype(bool)].copy()
blocks = [json.loads(b or "{}") for b in ok["blocks_json"]]
ok["value"] = [f"ds_layout={b.get('ds_layout', 'swz128')}" if d == 64 else f"stats_pairs={b.get('stats_pairs', False)}"
               for b, d in zip(blocks, ok["head_dim"])]
cells = ok.pivot_table(index=["head_dim", "batch", "seq", "causal"], columns="value", values="tflops", aggfunc="max")
for default in ("ds_layout=swz128", "stats_pairs=False"):
    for col in [c for c in cells.columns if c.split("=")[0] == default.split("=")[0] and c != default]:
        if default in cells:
            cells[f"{col} / default"] = cells[col] / cells[default]
pd.set_option("display.width", 250)
print(cells.round(3).to_string())
failed = df[~T.is_result(df)]
if len(failed):
    print(failed[["head_dim", "seq", "causal", "block_overrides_json", "status", "reason"]].to_string(index=False))
PY
}

case "$PART" in
  ab)  # one part, four sweeps, one merged table
    run_part ab "${COMMON[@]}" head_dim=64 batch=4 seq=4096 blocks.ds_layout=swz128,swz64,transposed \
      -- "${COMMON[@]}" head_dim=64 batch=1 seq=16384 blocks.ds_layout=swz128,swz64,transposed \
      -- "${COMMON[@]}" head_dim=128 batch=4 seq=4096 blocks.stats_pairs=false,true \
      -- "${COMMON[@]}" head_dim=128 batch=1 seq=16384 blocks.stats_pairs=false,true > /dev/null
    grep -E "wrong|crashed|timeout|error|KERNEL-SUM" "$OUT/${PREFIX}_ab.log" | head -20
    table "$OUT/${PREFIX}_ab.parquet" 2>&1 | tee "$OUT/${PREFIX}_ab_table.txt" ;;
  tests) python -m pytest -q tests/test_ws_smem_levers.py 2>&1 | tee "$OUT/${PREFIX}_tests.log" | tail -30 ;;
  table) shift; table "$@" ;;
  *) echo "unknown part $PART: ab | tests | table TABLE..." >&2; exit 2 ;;
esac
