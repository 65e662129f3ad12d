#!/usr/bin/env bash
# One sweep on 1, 2, 4 (and 8) GPUs of this node with hydra/launcher=local_gpus and the default isolation (issues 39,
# 46): wall time, points per minute, the share of `ok` points, the GPU indices, each point once, and where each run's
# time went: its fixed phases (preflight, launch, job processes and workers up to the first point, tail) and its
# point phase (first point -> last row), from the run's phase log (runners/phases.py, FLASH_BWD_PHASE_LOG).
#
#   bash scripts/gpu_scaling.sh                         # counts 1 2 4 8, up to the GPUs this node has; tables in $OUT
#   COUNTS=1 OUT=a bash scripts/gpu_scaling.sh          # one device call (600 s): the one-GPU run ...
#   COUNTS="2 4" PREVIOUS=a OUT=b bash scripts/gpu_scaling.sh   # ... another: 2 and 4 GPUs, one table with a's run
#
# The sweep: 32 points (seq 2048/4096 x head_dim 64/128 x causal/not x $VARIANTS: two_pass, atomic, cuDNN, FA2 on the FA
# grid's B*N = 16384, H*D = 2048), bench.rep=$REP_MS (10000): every point takes ~REP_MS + 0.3 s, so the one-GPU point
# phase is ~330 s, past its fixed ~25-40 s (the limits need P >= ~310 s: docs/scaling.md). A first pass on every GPU
# with short timings fills the one Triton cache all the timed runs share (TRITON_CACHE_DIR under $WORK; KEEP_WORK=1
# keeps $WORK from an earlier call on this machine), so the runs compare the sweeps, not who compiles first. Each run
# with n GPUs sets CUDA_VISIBLE_DEVICES to the first n, and stops after $SWEEP_TIMEOUT_S (480) s ($WARM_TIMEOUT_S for
# the warm-up; WARM_GPUS: the GPUs it uses, default all, e.g. 1 to leave the others free for other work).
# PREVIOUS: the $OUT of an earlier call (its <gpu>_scaling_runs.jsonl and rows files): its runs join
# this table (the same sweep: REP_MS, VARIANTS and the GPU must match, else FAIL). The Gluon designs (ws,
# ws_two_pass) are left out of the default set: on 4 H200s (2026-11-26) a warm-up pass of ws, ws_two_pass, two_pass
# and cuDNN took over 9 minutes (results/h200x4/README.md).
# Writes $OUT/<gpu>_scaling.parquet (the table), $OUT/<gpu>_scaling.md, $OUT/<gpu>_scaling_runs.jsonl (one line per
# run of this call and PREVIOUS's), $OUT/<gpu>_scaling_rows_gpus<n>.parquet (every row of each run), the logs and
# the phase logs. Needs hydra-core and hydra-joblib-launcher on the path (../shared/wheels).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the output folder}
WORK=${WORK:-/tmp/flash_bwd_scaling}
REP_MS=${REP_MS:-10000}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$WORK/triton
[ "${KEEP_WORK:-0}" = 1 ] || rm -rf "$WORK"
mkdir -p "$WORK" "$OUT"
gpus=$($PY -c "import torch; print(torch.cuda.device_count())")
GPU=$($PY -c "import torch; n = torch.cuda.get_device_name(0); print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')")
[ "$gpus" -ge 1 ] || { echo "FAIL: no GPU"; exit 1; }
VARIANTS=${VARIANTS:-two_pass,atomic,sdpa_cudnn,sdpa_flash}
GRID=(seq=2048,4096 head_dim=64,128 causal=true,false variant=$VARIANTS tokens=16384 hidden=2048)

sweep() {  # $1: GPUs, $2: name, then overrides
  local n=$1 name=$2 limit=${SWEEP_TIMEOUT_S:-480}; shift 2
  [ "$name" = warm ] && limit=${WARM_TIMEOUT_S:-$limit}
  rm -rf "$WORK/results-$name" "$WORK/multirun-$name" "$OUT/${GPU}_scaling_$name.phases.jsonl"
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1))) FLASH_BWD_PHASE_LOG="$OUT/${GPU}_scaling_$name.phases.jsonl" \
    timeout "$limit" $PY -m runners.sweep -m hydra/launcher=local_gpus \
    hydra.launcher.n_jobs="$n" "${GRID[@]}" "$@" results_dir="$WORK/results-$name" sweep_id="$name" \
    hydra.sweep.dir="$WORK/multirun-$name" > "$OUT/${GPU}_scaling_$name.log" 2>&1
}

echo "== warm-up on $gpus GPU(s), $(date +%T): every kernel compiled once into $TRITON_CACHE_DIR"
t0=$(date +%s.%N); sweep "${WARM_GPUS:-$gpus}" warm bench.warmup=5 bench.rep=10; rc=$?; echo "warm-up: exit $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" "BEGIN{printf \"%.0f\", b-a}") s"
runs=()
for n in ${COUNTS:-1 2 4 8}; do
  [ "$n" -le "$gpus" ] || { echo "== $n GPUs: skipped (this node has $gpus)"; continue; }
  echo "== $n GPU(s), $(date +%T)"
  t0=$(date +%s.%N); sweep "$n" "gpus$n" bench.warmup=100 bench.rep="$REP_MS"; rc=$?; t1=$(date +%s.%N)
  runs+=("$n:$rc:$t0:$t1")
  tail -1 "$OUT/${GPU}_scaling_gpus$n.log"
done

$PY scripts/scaling_table.py --work "$WORK" --out "$OUT" --gpu "$GPU" --rep-ms "$REP_MS" --variants "$VARIANTS" \
  ${PREVIOUS:+--previous "$PREVIOUS"} "${runs[@]}"
