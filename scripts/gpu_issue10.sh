#!/usr/bin/env bash
# Issue 10 on one GPU (an H100): the FlashAttention grid as results/h200/fa_grid.parquet was run (NOTES.md,
# issue 5; fa_grid.log), now with the per-kernel and compiled-resource columns, then runners.regress of the
# committed H200 grid against it (cross-GPU: per shape, each side's best correct config).
#
#   bash scripts/gpu_issue10.sh bf16      # 72 grid points + 12 deterministic atomic, bf16      (~4-5 min on an H100)
#   bash scripts/gpu_issue10.sh fp16      # 72 grid points, fp16                                (~4 min)
#   bash scripts/gpu_issue10.sh extra     # GQA (B2 H32/8 N8192) + long context (B1 H16 N32768), bf16+fp16 (~2-3 min)
#   bash scripts/gpu_issue10.sh blocks    # optional: sweep=blocks two_pass N4096 D128 causal (64 configs, ~3-4 min),
#                                         # the data of the registers/spills-vs-TFLOPS view
#   bash scripts/gpu_issue10.sh regress [DIR]   # no GPU needed: merges DIR/h100_fa_grid_{bf16,fp16,extra}.parquet
#                                         # (default DIR=results/h100) and compares with results/h200/fa_grid.parquet
#
# Each grid part writes into $OUT: h100_fa_grid_<part>.parquet (one flat merged table) and h100_fa_grid_<part>.log,
# and prints, for every ok GPU row, kernel_ms_sum / ms (the per-kernel times must add up to the measured backward
# within 10%). Copy the part tables into results/h100/ (and commit them) before the regress step; regress writes
# $OUT/h100_fa_grid.parquet, $OUT/regress_h200_vs_h100.md and $OUT/regress.log.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
PART=${1:?usage: gpu_issue10.sh bf16|fp16|extra|blocks|regress [DIR]}
SCRATCH=${TMPDIR:-/tmp}/flash_bwd_issue10/$PART   # the runner's one-file-per-point rows (not in $OUT)
VARIANTS=two_pass,fused,atomic,sdpa_flash,sdpa_cudnn,flex
GRID=(tokens=16384 hidden=2048 seq=1024,4096,16384 head_dim=64,128 causal=true,false)
mkdir -p "$OUT" "$SCRATCH"

check_kernel_sums() {  # $1: a merged table; prints one line per ok GPU row and a summary
  python - "$1" <<'EOF'
import sys
import pandas as pd
df = pd.read_parquet(sys.argv[1])
ok = df[(df["status"] == "ok") & df["timing_meaningful"].astype(bool)]
bad = 0
print(f"{'variant':<22} {'shape':<34} {'dtype':<5} {'ms':>8} {'kernels':>8} {'ratio':>6}  top kernel (share) / heaviest Triton kernel regs,spills,smem,programs/SM")
for _, r in ok.iterrows():
    variant = r["variant"] + ("+det" if r.get("deterministic") in (True,) else "")
    shape = f"B{r['batch']} H{r['heads']}/{r['kv_heads']} N{r['seq']} D{r['head_dim']}{' causal' if r['causal'] else ''}"
    ratio = r["kernel_ms_sum"] / r["ms"] if pd.notna(r.get("kernel_ms_sum")) else float("nan")
    flag = "ok" if abs(ratio - 1) <= 0.10 else "OFF"
    bad += flag != "ok"
    res = "" if pd.isna(r.get("n_regs")) else (f" / {r['top_triton_kernel']} {r['n_regs']:.0f},{r['n_spills']:.0f},"
                                               f"{r['smem_bytes'] / 1024:.0f}K,{r['programs_per_sm']:.0f}")
    print(f"{variant:<22} {shape:<34} {r['dtype']:<5} {r['ms']:8.3f} {r['kernel_ms_sum']:8.3f} {ratio:6.3f} {flag:>3} "
          f"{r['top_kernel']} ({r['top_kernel_share']:.0%}){res}  {r.get('profile_note') or ''}")
print(f"KERNEL-SUM CHECK: {len(ok) - bad}/{len(ok)} ok GPU rows have kernel_ms_sum within 10% of ms"
      + ("" if not bad else f"; {bad} OFF"))
EOF
}

run_part() {  # $1: part; then one or more sweeps, separated by '--'
  local part=$1; shift
  local log="$OUT/h100_fa_grid_$part.log" table="$OUT/h100_fa_grid_$part.parquet" args=() i=0
  : > "$log"
  for arg in "$@" --; do
    if [ "$arg" = "--" ]; then
      i=$((i + 1))
      echo "+ python -m runners.sweep -m ${args[*]} results_dir=$SCRATCH sweep_id=issue10-$part-$i" | tee -a "$log"
      python -m runners.sweep -m "${args[@]}" results_dir="$SCRATCH" sweep_id="issue10-$part-$i" 2>&1 | tee -a "$log"
      args=()
    else
      args+=("$arg")
    fi
  done
  python -m runners.merge "$SCRATCH" out="$table" 2>&1 | tee -a "$log"
  check_kernel_sums "$table" 2>&1 | tee -a "$log"
}

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
from runners import regress, tables as T
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
