#!/usr/bin/env bash
# Verification of the README's Scaling out section on one node with 2 GPUs (about 4-6 minutes):
#   A  the 16-point sweep with hydra/launcher=local_gpus (one job per GPU at a time), wall time;
#   C  meanwhile, a second sweep started by hand (basic launcher, gpu.index=auto): it must print
#      "waiting for a free GPU" and only then run, never sharing a GPU with A;
#   B  the same 16 points with the basic launcher on GPU 0 alone, wall time;
#   then: gpu_index counts per sweep, `runners.merge` of A + B + C (each point exactly once), both wall times.
# Every sweep compiles into its own empty Triton cache, so A and B both pay the compile.
#
#   bash scripts/gpu_two_gpu_scaling.sh            # from the repository root; logs and the merged table go to $OUT
#
# Needs: hydra-core, omegaconf, antlr4, hydra-joblib-launcher, joblib (>= 1.6 needs cloudpickle >= 3) on the
# path. Where joblib is missing and .whl/ holds joblib and cloudpickle wheels, they are installed into
# /tmp/site (on PYTHONPATH). Without .git, the commit comes from $FLASH_BWD_COMMIT.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/two_gpu_check_out}
WORK=${WORK:-/tmp/two_gpu_check}
mkdir -p "$OUT"
rm -rf "$WORK" && mkdir -p "$WORK"
export FLASH_BWD_COMMIT=${FLASH_BWD_COMMIT:-unknown}
export PYTHONUNBUFFERED=1

if ! $PY -c "import joblib, hydra_plugins.hydra_joblib_launcher" 2>/dev/null; then
    wheels=$(ls .whl/joblib-*.whl .whl/cloudpickle-*.whl 2>/dev/null)
    if [ -n "$wheels" ]; then
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site $wheels
        export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
    fi
    $PY -c "import joblib, hydra_plugins.hydra_joblib_launcher" || {
        echo "FAIL: joblib / hydra-joblib-launcher not importable (carry their wheels in .whl/)"; exit 1; }
fi
gpus=$($PY -c "import torch; print(torch.cuda.device_count())")
[ "$gpus" -ge 2 ] || { echo "FAIL: needs 2 GPUs, found $gpus"; exit 1; }

# 16 points: 2 seq x 2 head_dim x 2 causal x 2 variants; B*N = 16384 tokens and H*D = 2048 fixed (the
# FlashAttention papers' grid); 1.5 s of timed reps per point so that a point outlasts a sweep's start-up.
GRID=(seq=2048,4096 head_dim=64,128 causal=true,false variant=two_pass,fused tokens=16384 hidden=2048
      bench.warmup=100 bench.rep=1500)
SECOND=(seq=1024 head_dim=64 causal=true,false variant=two_pass tokens=8192 hidden=2048
        bench.warmup=25 bench.rep=200 gpu.index=auto)

now() { date +%s.%N; }

echo "== A: hydra/launcher=local_gpus on $gpus GPUs, 16 points  (+ C: a second sweep by hand, 2 points)"
start_a=$(now)
TRITON_CACHE_DIR=$WORK/triton-A $PY -m runners.sweep -m hydra/launcher=local_gpus "${GRID[@]}" \
    results_dir="$WORK/results-A" sweep_id=A hydra.sweep.dir="$WORK/multirun-A" > "$OUT/A.log" 2>&1 &
pid_a=$!
# Start C once A has finished its first points: both of A's workers are then in the middle of the sweep.
for _ in $(seq 120); do
    [ "$(find "$WORK/results-A" -name '*.parquet' 2>/dev/null | wc -l)" -ge 2 ] && break
    sleep 0.5
done
TRITON_CACHE_DIR=$WORK/triton-C $PY -m runners.sweep -m "${SECOND[@]}" \
    results_dir="$WORK/results-C" sweep_id=C hydra.sweep.dir="$WORK/multirun-C" > "$OUT/C.log" 2>&1 &
pid_c=$!
wait $pid_a; rc_a=$?
end_a=$(now)
wait $pid_c; rc_c=$?

echo "== B: basic launcher, GPU 0 only, the same 16 points"
start_b=$(now)
TRITON_CACHE_DIR=$WORK/triton-B $PY -m runners.sweep -m "${GRID[@]}" gpu.index=0 \
    results_dir="$WORK/results-B" sweep_id=B hydra.sweep.dir="$WORK/multirun-B" > "$OUT/B.log" 2>&1
rc_b=$?
end_b=$(now)

grep -h "Joblib.Parallel" "$OUT/A.log" | head -1
echo "-- C's log (the second sweep):"
grep -E "waiting for a free GPU|GPU lease|\[[0-9]+/[0-9]+\]" "$OUT/C.log"

$PY -m runners.merge "$WORK/results-A" "$WORK/results-B" "$WORK/results-C" out="$OUT/merged.parquet" \
    > "$OUT/merge.log" 2>&1
rc_m=$?
cat "$OUT/merge.log"

$PY - "$WORK" "$OUT" "$start_a" "$end_a" "$start_b" "$end_b" "$rc_a" "$rc_b" "$rc_c" "$rc_m" <<'EOF' | tee "$OUT/summary.txt"
import sys
from pathlib import Path

import pandas as pd

from runners import results

work, out = Path(sys.argv[1]), Path(sys.argv[2])
start_a, end_a, start_b, end_b = map(float, sys.argv[3:7])
rc_a, rc_b, rc_c, rc_m = map(int, sys.argv[7:11])
key = list(results.DEDUPE_KEY)
checks = []


def check(ok: bool, text: str) -> None:
    checks.append(ok)
    print(f"{'PASS' if ok else 'FAIL'}: {text}")


def rows(name: str) -> pd.DataFrame:
    path = work / f"results-{name}"
    return results.load(path) if path.exists() else pd.DataFrame(columns=[*key, "gpu_index", "status"])


a, b, c = rows("A"), rows("B"), rows("C")
pd.concat([a, b, c], ignore_index=True).to_parquet(out / "sweeps_ABC.parquet", index=False)  # every row, per-row gpu_index
for name, df in (("A local_gpus", a), ("B basic", b), ("C by hand", c)):
    counts = df["gpu_index"].value_counts(dropna=False).sort_index().to_dict() if len(df) else {}
    statuses = df["status"].value_counts().to_dict() if len(df) else {}
    print(f"{name}: {len(df)} rows, gpu_index counts {counts}, statuses {statuses}")
check(rc_a == 0 and rc_b == 0 and rc_c == 0, f"every sweep exited 0 (A {rc_a}, B {rc_b}, C {rc_c})")
check(len(a) == 16 and a["config_key"].is_unique, "A: 16 rows, each point once")
check(len(b) == 16 and b["config_key"].is_unique, "B: 16 rows, each point once")
check(set(a["gpu_index"].dropna().astype(int)) == {0, 1}, "A ran on both GPUs")
check(set(b["gpu_index"].dropna().astype(int)) == {0}, "B ran on GPU 0 only")
log_c = (out / "C.log").read_text()
check("waiting for a free GPU" in log_c and len(c) == 2, "C waited for a free GPU, then recorded its 2 points")
merged = pd.read_parquet(out / "merged.parquet") if (out / "merged.parquet").exists() else pd.DataFrame(columns=key)
merged_keys = list(merged[key].astype(str).itertuples(index=False, name=None))
all_keys = set(pd.concat([a, b, c])[key].astype(str).itertuples(index=False, name=None))
distinct = len(all_keys)  # A and B measure the same 16 points; C's 2 points are other shapes
check(rc_m == 0 and len(merged_keys) == len(set(merged_keys)) == distinct,
      f"merged A+B+C ({len(a) + len(b) + len(c)} rows): {len(merged)} rows = {distinct} distinct points, each once")
wall_a, wall_b = end_a - start_a, end_b - start_b
print(f"wall time A (local_gpus, 2 GPUs; C ran alongside): {wall_a:.1f} s")
print(f"wall time B (basic launcher, 1 GPU):              {wall_b:.1f} s")
print(f"speed-up B/A: {wall_b / wall_a:.2f}x")
print(f"{sum(checks)} passed, {len(checks) - sum(checks)} failed")
sys.exit(0 if all(checks) else 1)
EOF
