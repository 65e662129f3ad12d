#!/usr/bin/env bash
# The FlashAttention grid on one GPU (an H100; written for issue 10), as results/h200/fa_grid.parquet was run (NOTES.md,
# issue 5; fa_grid.log), now with the per-kernel and compiled-resource columns, then runners.regress of the
# committed H200 grid against it (cross-GPU: per shape, each side's best correct config).
#
#   bash scripts/gpu_fa_grid_regress.sh bf16      # 84 grid points + 12 deterministic atomic, bf16      (~4-5 min on an H100 before fa4)
#   bash scripts/gpu_fa_grid_regress.sh fp16      # 84 grid points (7 variants x 12 cells), fp16        (~4 min before fa4)
#   bash scripts/gpu_fa_grid_regress.sh extra     # GQA (B2 H32/8 N8192) + long context (B1 H16 N32768), bf16+fp16 (~2-3 min)
#   bash scripts/gpu_fa_grid_regress.sh blocks    # optional: sweep=blocks two_pass N4096 D128 causal (64 configs, ~3-4 min),
#                                         # the data of the registers/spills-vs-TFLOPS view
#   bash scripts/gpu_fa_grid_regress.sh regress [DIR]   # no GPU needed: merges DIR/h100_fa_grid_{bf16,fp16,extra}.parquet
#                                         # (default DIR=results/h100) and compares with results/h200/fa_grid.parquet
#
# Each grid part writes into $OUT: h100_fa_grid_<part>.parquet (one flat merged table) and h100_fa_grid_<part>.log,
# and prints, for every ok GPU row, kernel_ms_sum / ms (the per-kernel times must add up to the measured backward
# within 10%). Copy the part tables into results/h100/ (and commit them) before the regress step; regress writes
# $OUT/h100_fa_grid.parquet, $OUT/regress_h200_vs_h100.md and $OUT/regress.log.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
PART=${1:?usage: gpu_fa_grid_regress.sh bf16|fp16|extra|blocks|regress [DIR]}
SCRATCH=${TMPDIR:-/tmp}/flash_bwd_issue10/$PART   # the runner's one-file-per-point rows (not in $OUT)
VARIANTS=two_pass,fused,atomic,sdpa_flash,sdpa_cudnn,flex,fa4  # fa4: FlashAttention-4 (docs/fa4.md)
GRID=(tokens=16384 hidden=2048 seq=1024,4096,16384 head_dim=64,128 causal=true,false)
mkdir -p "$OUT" "$SCRATCH"

PREFIX=h100_fa_grid SWEEP_ID=issue10
# shellcheck source=scripts/sweep_parts.sh
source "$(dirname "$0")/sweep_parts.sh"

case "$PART" in
  bf16)
    run_part bf16 "${GRID[@]}" dtype=bf16 variant=$VARIANTS \
      -- "${GRID[@]}" dtype=bf16 variant=atomic blocks.deterministic=true ;;
  fp16)
    run_part fp16 "${GRID[@]}" dtype=fp16 variant=$VARIANTS ;;
  extra)
    run_part extra batch=2 heads=32 kv_heads=8 seq=8192 head_dim=128 causal=true dtype=bf16,fp16 variant=$VARIANTS \
      -- batch=1 heads=16 seq=32768 head_dim=128 causal=true dtype=bf16,fp16 variant=$VARIANTS ;;
  blocks)
    run_part blocks sweep=blocks variant=two_pass tokens=16384 hidden=2048 seq=4096 head_dim=128 causal=true ;;
  regress)
    DIR=${2:-results/h100}
    parts=("$DIR"/h100_fa_grid_bf16.parquet "$DIR"/h100_fa_grid_fp16.parquet "$DIR"/h100_fa_grid_extra.parquet)
    present=()
    for p in "${parts[@]}"; do [ -f "$p" ] && present+=("$p") || echo "missing part: $p"; done
    [ ${#present[@]} -gt 0 ] || { echo "no part tables under $DIR"; exit 2; }
    {
      python -m runners.merge "${present[@]}" out="$OUT/h100_fa_grid.parquet"
      check_kernel_sums "$OUT/h100_fa_grid.parquet" | tail -1
      python -m runners.regress baseline=results/h200/fa_grid.parquet candidate="$OUT/h100_fa_grid.parquet" \
        out="$OUT/regress_h200_vs_h100.md"
      echo "regress exit status: $? (cross-GPU: 1 only for wrong gradients)"
      python - "$OUT/h100_fa_grid.parquet" <<'EOF'
import sys
from runners import tables as T
from runners.regression import measured as regress
base, cand = T.load("results/h200/fa_grid.parquet"), T.load(sys.argv[1])
cmp = regress.compare(base, cand)
both = cmp.table[cmp.table["_merge"] == "both"]
print("compared shapes per variant (H200 -> H100):")
print(both.groupby("variant")["verdict"].value_counts().unstack(fill_value=0).to_string())
print(f"shapes only in H200: {int((cmp.table['_merge'] == 'left_only').sum())}, "
      f"only in H100: {int((cmp.table['_merge'] == 'right_only').sum())}")
EOF
    } 2>&1 | tee "$OUT/regress.log" ;;
  *)
    echo "unknown part $PART: bf16 | fp16 | extra | blocks | regress [DIR]"; exit 2 ;;
esac
