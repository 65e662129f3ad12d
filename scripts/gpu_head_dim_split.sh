#!/usr/bin/env bash
# Issue 43's head_dim_split A/B on one GPU: ws and ws_two_pass at D96 with the split off and on (64 + 32 head-dim
# chunks instead of one 128-column chunk with 32 zero columns), FlashAttention-4 beside them, B2 H16 N4096 bf16,
# causal and not: runners.sweep rows (accuracy-gated), off / on next to each other, then again in the other order.
#
#   bash scripts/gpu_head_dim_split.sh tests         # its GPU tests, fast tier (tests/test_ws.py -k head_dim_split)
#   bash scripts/gpu_head_dim_split.sh tests-slow    # the rest of them (-m slow)
#   bash scripts/gpu_head_dim_split.sh ab            # rows -> $OUT/<gpu>_split96_ab_r1|r2.parquet (+ .log), the table
#   bash scripts/gpu_head_dim_split.sh table TABLE...  # no GPU: per cell, TFLOPS off / on per run, on / off, x fa4
#
# fa4 rows need FlashAttention-4's wheels carried (docs/fa4.md); without them they are `unsupported` and the A/B stands.
# Copy the tables to results/<gpu>/gluon/ab_issue43/ and commit. About 3-5 min cold (Gluon compiles), 2 min warm.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
PART=${1:?usage: gpu_head_dim_split.sh tests | tests-slow | ab | table TABLE}
GPU=$(python -c "import torch; n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''; \
print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')" 2>/dev/null || echo gpu)
export PREFIX=${GPU}_split96 SWEEP_ID=split96 SWEEP_TIMEOUT_S=${SWEEP_TIMEOUT_S:-240}
export SCRATCH=${TMPDIR:-/tmp}/flash_bwd_split96/$PART
SHAPE=(batch=2 heads=16 seq=4096 head_dim=96 causal=false,true dtype=bf16)
mkdir -p "$OUT" "$SCRATCH"
# shellcheck source=scripts/sweep_parts.sh
source "$(dirname "$0")/sweep_parts.sh"

table() {  # $@: merged tables -> per (causal, design): TFLOPS with the split off and on, per sweep; on / off; x fa4
  python - "$@" <<'PY'
import json
import sys

import pandas as pd

from runners import tables as T

df = pd.concat([T.load(path) for path in sys.argv[1:]], ignore_index=True)
ok = df[T.is_result(df) & df["timing_meaningful"].astype(bool)].copy()
ok["split"] = [bool(json.loads(b or "{}").get("head_dim_split", False)) for b in ok["blocks_json"]]
fa4 = ok[ok["variant"] == "fa4"].groupby("causal")["tflops"].max()
designs = ok[ok["variant"] != "fa4"]
runs = designs.pivot_table(index=["causal", "variant"], columns=["split", "sweep_id"], values="tflops", aggfunc="max")
best = designs.pivot_table(index=["causal", "variant"], columns="split", values="tflops", aggfunc="max")
best["on/off"] = best[True] / best[False]
best["off x fa4"] = best[False] / best.index.get_level_values("causal").map(fa4)
best["on x fa4"] = best[True] / best.index.get_level_values("causal").map(fa4)
pd.set_option("display.width", 250)
print(runs.round(1).to_string())
print(best.round(3).to_string())
failed = df[~T.is_result(df)]
if len(failed):
    print(failed[["variant", "causal", "block_overrides_json", "status", "reason"]].to_string(index=False))
PY
}

case "$PART" in
  tests) python -m pytest -q tests/test_ws.py -k head_dim_split -m "not slow" 2>&1 | tee "$OUT/${PREFIX}_tests.log" ;;
  tests-slow) python -m pytest -q tests/test_ws.py -k head_dim_split -m slow 2>&1 | tee "$OUT/${PREFIX}_tests_slow.log" ;;
  ab)  # two runs, each its own folder and table (runners.merge keeps one row per config): off / on, then on / off
    SCRATCH=$SCRATCH/r1 run_part ab_r1 variant=ws,ws_two_pass "${SHAPE[@]}" blocks.head_dim_split=false,true \
      -- variant=fa4 "${SHAPE[@]}"
    SCRATCH=$SCRATCH/r2 run_part ab_r2 variant=fa4 "${SHAPE[@]}" \
      -- variant=ws,ws_two_pass "${SHAPE[@]}" blocks.head_dim_split=true,false
    table "$OUT/${PREFIX}_ab_r1.parquet" "$OUT/${PREFIX}_ab_r2.parquet" 2>&1 | tee "$OUT/${PREFIX}_ab_table.txt" ;;
  table) shift; table "$@" ;;
  *) echo "unknown part $PART: tests | tests-slow | ab | table TABLE" >&2; exit 2 ;;
esac
