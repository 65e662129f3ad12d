#!/usr/bin/env bash
# Packed variable-length batches on one GPU (245 s on an H100 before atomic_tma and E were added;
# the sweeps stop at ISSUE11_DEADLINE_S=530 s so merge and table fit one 600 s device call).
#   A) varlen=lognormal (mean doc length 2048), tokens 16k / 64k, D 64 / 128, causal, bf16:
#      two_pass, atomic, fused, atomic_tma, flex, sdpa_flash (FA2 varlen); sdpa_cudnn in its own process (ragged cuDNN path)
#      and fa4 (FlashAttention-4's flash_attn_varlen_func; docs/fa4.md) in its own, with its share of D
#   B) the matching uniform batches: varlen=none seq=2048 at the same tokens (B = tokens / 2048)
#   C) TFLOPS vs mean document length: tokens 64k, D 128, mean 512 / 4096, lognormal and uniform batches
#   D) bf16 correctness: GQA 16/4, odd lengths (varlen=uniform mean 300, 5000 tokens), causal and not, every Triton
#      design incl. deterministic atomic / atomic_tma, and FA2 varlen, through the runner's accuracy gate
#   E) longest_first=true (program table heaviest first) for two_pass and atomic_tma on A's batches
# Everything goes to $OUT: varlen.parquet (one flat table, every row) and varlen.log.
# Every point's gradients are checked against the fp32 reference (per document) before timing.
set -uo pipefail
OUT=${OUT:-/tmp/out_issue11}
# shellcheck source=scripts/fa4_install.sh
source "$(dirname "$0")/fa4_install.sh"  # FlashAttention-4 on PYTHONPATH when carried (docs/fa4.md)
mkdir -p "$OUT"
ROWS=$(mktemp -d /tmp/issue11_rows.XXXX)
LOG="$OUT/varlen.log"
BENCH="bench.warmup=25 bench.rep=250"
COMMON="results_dir=$ROWS hidden=2048 causal=true dtype=bf16 $BENCH"
start=$(date +%s)
DEADLINE_S=${ISSUE11_DEADLINE_S:-530}  # the sweeps stop here, so the merge and the table fit in one 600 s call
run() {  # run <seconds> <sweep args...>: one multirun, bounded so the script always finishes
  local limit=$1; shift
  local left=$(( DEADLINE_S - ($(date +%s) - start) ))
  if [ "$left" -lt 15 ]; then echo "== skipped (deadline): runners.sweep -m $*" | tee -a "$LOG"; return; fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $(( $(date +%s) - start ))s: runners.sweep -m $*" | tee -a "$LOG"
  timeout "$limit" python -m runners.sweep -m "$@" >>"$LOG" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && echo "   (exit $rc)" | tee -a "$LOG"
  tail -n 12 "$LOG" | grep -E "^\[|TFLOPS|wrong|error" | tail -n 4
}

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$LOG"
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$LOG"

# A: the headline table; flex in its own isolated run (it compiles one graph per shape; a point that overruns
# point_timeout_s becomes a `timeout` row and the others go on)
run 190 $COMMON sweep_id=issue11-A varlen=lognormal seq=2048 tokens=16384,65536 head_dim=64,128 \
    variant=two_pass,atomic,fused,atomic_tma,sdpa_flash
run 240 $COMMON sweep_id=issue11-A-flex varlen=lognormal seq=2048 tokens=16384,65536 head_dim=64,128 \
    variant=flex isolate=true point_timeout_s=100
# B: uniform batches at the same tokens (flex uniform numbers: results/h200/fa_grid.parquet)
run 110 $COMMON sweep_id=issue11-B varlen=none seq=2048 tokens=16384,65536 head_dim=64,128 \
    variant=two_pass,atomic,fused,atomic_tma,sdpa_flash
# C: mean document length scan (TFLOPS vs mean doc length; 2048 comes from A and B)
run 110 $COMMON sweep_id=issue11-C varlen=lognormal,none seq=512,4096 tokens=65536 head_dim=128 \
    variant=two_pass,atomic,fused,atomic_tma,sdpa_flash
# D: bf16 correctness on GQA and odd document lengths (the accuracy gate decides ok / wrong)
run 75 results_dir=$ROWS dtype=bf16 $BENCH sweep_id=issue11-D varlen=uniform seq=300 tokens=5000 heads=16 kv_heads=4 \
    head_dim=64 causal=true,false variant=two_pass,atomic,fused,atomic_tma,sdpa_flash
run 30 results_dir=$ROWS dtype=bf16 $BENCH sweep_id=issue11-D2 varlen=uniform seq=300 tokens=5000 heads=16 kv_heads=4 \
    head_dim=64 causal=true variant=atomic blocks.deterministic=true
run 30 results_dir=$ROWS dtype=bf16 $BENCH sweep_id=issue11-D3 varlen=uniform seq=300 tokens=5000 heads=16 kv_heads=4 \
    head_dim=64 causal=true variant=atomic_tma blocks.deterministic=true
# E: longest_first on packed batches (the program table sorted heaviest first), against A's document order
run 120 $COMMON sweep_id=issue11-E varlen=lognormal seq=2048 tokens=16384,65536 head_dim=64,128 \
    variant=two_pass,atomic_tma blocks.longest_first=true
# cuDNN's ragged path last, in its own processes: a failure there cannot disturb the rows above
run 60 $COMMON sweep_id=issue11-cudnn varlen=lognormal seq=2048 tokens=16384,65536 head_dim=64,128 variant=sdpa_cudnn
# FlashAttention-4's varlen path, likewise: A's batches, then D's GQA / odd-length correctness
run 60 $COMMON sweep_id=issue11-fa4 varlen=lognormal seq=2048 tokens=16384,65536 head_dim=64,128 variant=fa4
run 30 results_dir=$ROWS dtype=bf16 $BENCH sweep_id=issue11-D-fa4 varlen=uniform seq=300 tokens=5000 heads=16 \
    kv_heads=4 head_dim=64 causal=true,false variant=fa4

python -m runners.merge "$ROWS" out="$OUT/varlen.parquet" 2>&1 | tee -a "$LOG" | head -n 3
python - "$OUT/varlen.parquet" <<'PY' 2>&1 | tee -a "$LOG"
import sys
import pandas as pd
df = pd.read_parquet(sys.argv[1])
print(df.groupby(["status"]).size().to_string())
bad = df[df.status != "ok"]
for _, r in bad.iterrows():
    print(f"  {r.status}: {r.variant} {r.varlen_dist} tokens={r.tokens_total} d={r.head_dim}: {str(r.reason)[:160]}")
lf = df[(df.status == "ok") & df.sweep_id.isin(["issue11-A", "issue11-E"]) & df.variant.isin(["two_pass", "atomic_tma"])]
if not lf.empty:
    lf = lf.assign(order=lf.sweep_id.map({"issue11-A": "document order", "issue11-E": "heaviest first"}))
    print("\nlongest_first on lognormal packed batches (TFLOPS):")
    print(lf.pivot_table(index=["tokens_total", "head_dim"], columns=["variant", "order"], values="tflops").round(1)
          .to_string())
ok = df[(df.status == "ok")
        & df.sweep_id.isin(["issue11-A", "issue11-A-flex", "issue11-B", "issue11-cudnn", "issue11-fa4"])]
ok = ok.assign(batch_kind=ok.varlen_dist)
table = ok.pivot_table(index=["tokens_total", "head_dim", "batch_kind"], columns="variant", values="tflops")
pd.set_option("display.width", 200)
print("\nTFLOPS (bf16, causal, backward only; lognormal mean doc 2048 vs uniform seq 2048):")
print(table.round(1).to_string())
PY
echo "total $(( $(date +%s) - start ))s" | tee -a "$LOG"
