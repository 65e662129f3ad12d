#!/usr/bin/env bash
# One sweep on 1, 2, 4 (and 8) GPUs of this node with hydra/launcher=local_gpus and the default isolation (issues 39,
# 46): wall time, points per minute, the share of `ok` points, the GPU indices, each point once.
#
#   bash scripts/gpu_scaling.sh            # counts 1 2 4 8, up to the GPUs this node has; tables in $OUT
#   COUNTS="1 2" bash scripts/gpu_scaling.sh
#
# The sweep: 32 points (seq 2048/4096 x head_dim 64/128 x causal/not x $VARIANTS: two_pass, atomic, cuDNN, FA2 on the FA
# grid's B*N = 16384, H*D = 2048), bench.rep=$REP_MS (5000) so that every point takes longer than its compile. A first
# pass on every GPU with short timings fills the one Triton cache all the timed runs share (TRITON_CACHE_DIR), so the
# runs compare the sweeps, not who compiles first. Each run with n GPUs sets CUDA_VISIBLE_DEVICES to the first n, and
# stops after $SWEEP_TIMEOUT_S (300) s ($WARM_TIMEOUT_S for the warm-up). The Gluon designs (ws, ws_two_pass) are left out of the default set: on 4 H200s
# (2026-11-26) a warm-up pass of ws, ws_two_pass, two_pass and cuDNN took over 9 minutes (results/h200x4/README.md).
# Writes $OUT/<gpu>_scaling.parquet (the table), $OUT/<gpu>_scaling_rows.parquet (every row of every run),
# $OUT/<gpu>_scaling.md and the logs. Needs hydra-core and hydra-joblib-launcher on the path (../shared/wheels).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT to the output folder}
WORK=${WORK:-/tmp/flash_bwd_scaling}
REP_MS=${REP_MS:-5000}
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$WORK/triton
rm -rf "$WORK" && mkdir -p "$WORK" "$OUT"
gpus=$($PY -c "import torch; print(torch.cuda.device_count())")
GPU=$($PY -c "import torch; n = torch.cuda.get_device_name(0); print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')")
[ "$gpus" -ge 1 ] || { echo "FAIL: no GPU"; exit 1; }
VARIANTS=${VARIANTS:-two_pass,atomic,sdpa_cudnn,sdpa_flash}
GRID=(seq=2048,4096 head_dim=64,128 causal=true,false variant=$VARIANTS tokens=16384 hidden=2048)

sweep() {  # $1: GPUs, $2: name, then overrides
  local n=$1 name=$2 limit=${SWEEP_TIMEOUT_S:-300}; shift 2
  [ "$name" = warm ] && limit=${WARM_TIMEOUT_S:-$limit}
  CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1))) timeout "$limit" $PY -m runners.sweep -m hydra/launcher=local_gpus \
    hydra.launcher.n_jobs="$n" "${GRID[@]}" "$@" results_dir="$WORK/results-$name" sweep_id="$name" \
    hydra.sweep.dir="$WORK/multirun-$name" > "$OUT/${GPU}_scaling_$name.log" 2>&1
}

echo "== warm-up on $gpus GPU(s), $(date +%T): every kernel compiled once into $TRITON_CACHE_DIR"
t0=$(date +%s.%N); sweep "$gpus" warm bench.warmup=5 bench.rep=10; rc=$?; echo "warm-up: exit $rc, $(awk -v a="$t0" -v b="$(date +%s.%N)" "BEGIN{printf \"%.0f\", b-a}") s"
runs=()
for n in ${COUNTS:-1 2 4 8}; do
  [ "$n" -le "$gpus" ] || { echo "== $n GPUs: skipped (this node has $gpus)"; continue; }
  echo "== $n GPU(s), $(date +%T)"
  t0=$(date +%s.%N); sweep "$n" "gpus$n" bench.warmup=100 bench.rep="$REP_MS"; rc=$?; t1=$(date +%s.%N)
  runs+=("$n:$rc:$t0:$t1")
  tail -1 "$OUT/${GPU}_scaling_gpus$n.log"
done

$PY - "$WORK" "$OUT" "$GPU" "${runs[@]}" <<'PY'
import sys
from pathlib import Path

import pandas as pd

from runners.tables import results
from runners.tables.markdown import markdown_table

work, out, gpu, runs = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4:]
limits = {2: 0.6, 4: 0.35, 8: 0.2}  # wall time against one GPU's (issues 39, 46)
table, frames, checks = [], [], []
for run in runs:
    n, rc, t0, t1 = run.split(":")
    n, rc, wall = int(n), int(rc), float(t1) - float(t0)
    df = results.load(work / f"results-gpus{n}")
    frames.append(df.assign(n_gpus=n))
    table.append({"gpu": gpu, "n_gpus": n, "exit_status": rc, "points": len(df), "wall_s": round(wall, 1),
                  "points_per_min": round(len(df) / wall * 60, 2), "ok_share": round((df.status == "ok").mean(), 3),
                  "gpu_indices": ",".join(str(int(i)) for i in sorted(df.gpu_index.dropna().unique())),
                  "each_point_once": bool(df.config_key.is_unique)})
t = pd.DataFrame(table)
one = t.loc[t.n_gpus == 1, "wall_s"]
t["wall_vs_1_gpu"] = (t.wall_s / one.iloc[0]).round(3) if len(one) else float("nan")
t["limit"] = t.n_gpus.map(limits)
t.to_parquet(out / f"{gpu}_scaling.parquet", index=False)
pd.concat(frames, ignore_index=True).to_parquet(out / f"{gpu}_scaling_rows.parquet", index=False)
(out / f"{gpu}_scaling.md").write_text(markdown_table(t) + "\n")
print(t.to_string(index=False))
for r in t.itertuples():
    checks.append((r.exit_status == 0 and r.ok_share == 1.0 and r.each_point_once
                   and r.gpu_indices == ",".join(map(str, range(r.n_gpus))), f"{r.n_gpus} GPU(s): exit 0, every point ok"
                   f" and once, GPU indices {r.gpu_indices}"))
    if r.n_gpus in limits:
        checks.append((r.wall_vs_1_gpu <= limits[r.n_gpus], f"{r.n_gpus} GPUs: wall {r.wall_vs_1_gpu:.2f}x one GPU's"
                       f" (limit {limits[r.n_gpus]}x)"))
for ok, text in checks:
    print(f"{'PASS' if ok else 'FAIL'}: {text}")
print(f"{sum(ok for ok, _ in checks)} passed, {sum(not ok for ok, _ in checks)} failed")
sys.exit(0 if all(ok for ok, _ in checks) else 1)
PY
