# Shared by the scripts/gpu_*.sh drivers (source it): run_part runs one or more multiruns into $SCRATCH,
# merges them into one flat table $OUT/${PREFIX}_<part>.parquet (log: .log) and checks, for every ok GPU row,
# that the per-kernel times add up to the measured backward (kernel_ms_sum / ms within 10 %).
# Needs OUT, SCRATCH, PREFIX (table names) and SWEEP_ID (sweep ids: $SWEEP_ID-<part>-<n>).
# FlashAttention-4 (the fa4 baseline) goes on PYTHONPATH when its wheels were carried or installed (docs/fa4.md);
# without them one line says so and fa4 points are `unsupported` rows.
# shellcheck source=scripts/fa4_install.sh
source "$(dirname "${BASH_SOURCE[0]}")/fa4_install.sh"

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
  local log="$OUT/${PREFIX}_$part.log" table="$OUT/${PREFIX}_$part.parquet" args=() i=0
  : > "$log"
  for arg in "$@" --; do
    if [ "$arg" = "--" ]; then
      i=$((i + 1))
      echo "+ python -m runners.sweep -m ${args[*]} results_dir=$SCRATCH sweep_id=$SWEEP_ID-$part-$i" | tee -a "$log"
      # SWEEP_TIMEOUT_S bounds each sweep, DEADLINE_EPOCH (date +%s) all of them; the rows written so far stay
      local limit=${SWEEP_TIMEOUT_S:-86400}
      [ -n "${DEADLINE_EPOCH:-}" ] && limit=$(( DEADLINE_EPOCH - $(date +%s) < limit ? DEADLINE_EPOCH - $(date +%s) : limit ))
      if [ "$limit" -lt 10 ]; then
        echo "== skipped (deadline): sweep $i of part $part" | tee -a "$log"
      else
        timeout "$limit" python -m runners.sweep -m "${args[@]}" results_dir="$SCRATCH" \
          sweep_id="$SWEEP_ID-$part-$i" 2>&1 | tee -a "$log"
      fi
      args=()
    else
      args+=("$arg")
    fi
  done
  python -m runners.merge "$SCRATCH" out="$table" 2>&1 | tee -a "$log"
  check_kernel_sums "$table" 2>&1 | tee -a "$log"
}

