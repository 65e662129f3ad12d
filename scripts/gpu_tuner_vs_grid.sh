#!/usr/bin/env bash
# On one GPU (H100 or H200; written for issue 12): the Optuna tuner vs the exhaustive sweep=blocks grid, two_pass D=128 causal
# N=4096 (B=4, H=16, bf16). Expected wall time: ~4-6 min on an H100 (64 grid points + 3 x 16 tuner trials).
#   1. the exhaustive grid:  python -m runners.sweep -m sweep=blocks variant=two_pass head_dim=128 causal=true seq=4096
#   2. the tuner on the same space (space=grid: conf/sweep_grid/blocks_two_pass.yaml's fields and values) with
#      trials = floor(0.25 x grid size), TPE seed 0, three times: cold (warm_start=false: the search alone,
#      decompose=auto: one TPE study per kernel, told its kernel's time from kernel_ms), warm (trial 0 = the
#      current conf/block_defaults.yaml config, the tuner's default) and joint (decompose=false
#      warm_start=false: one TPE study over all fields, the baseline of the decomposition);
#   3. plots.study: one figure per study and the comparison (joint TPE vs decomposed TPE vs the grid's best).
# Each stage has its own results folder, so no stage reuses another's rows (every trial is measured).
# Writes flat into $OUT (7 files): grid.parquet, tune.parquet, issue12.log, study_comparison.md, study_*.png (3).
# Run from the repository root with hydra-core, omegaconf, antlr4 and optuna (+ deps) importable.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
mkdir -p "$OUT"
WORK=$(mktemp -d)
LOG="$OUT/issue12.log"
# CPU smoke run (interpreter): ISSUE12_SHAPE="variant=two_pass head_dim=16 causal=true seq=64 batch=1 heads=1 dtype=fp32 bench.cpu_warmup=0 bench.cpu_rep=1"
read -r -a SHAPE <<<"${ISSUE12_SHAPE:-variant=two_pass head_dim=128 causal=true seq=4096}"
export PYTHONUNBUFFERED=1

echo "== grid: sweep=blocks ${SHAPE[*]}" | tee "$LOG"
start=$SECONDS
python -m runners.sweep -m sweep=blocks "${SHAPE[@]}" results_dir="$WORK/grid" sweep_id=issue12-grid >>"$LOG" 2>&1
echo "grid: exit $? after $((SECONDS - start)) s" | tee -a "$LOG"

GRID_SIZE=$(python -c "from runners import tune; print(tune.space_size(tune.grid_space('two_pass')))")
TRIALS=$((GRID_SIZE / 4))
echo "grid size $GRID_SIZE -> tuner trials $TRIALS" | tee -a "$LOG"

for mode in cold warm joint; do
  warm=$([ "$mode" = warm ] && echo true || echo false)
  decompose=$([ "$mode" = joint ] && echo false || echo auto)
  echo "== tuner ($mode): space=grid trials=$TRIALS warm_start=$warm decompose=$decompose ${SHAPE[*]}" | tee -a "$LOG"
  start=$SECONDS
  python -m runners.tune "${SHAPE[@]}" space=grid trials="$TRIALS" sampler_seed=0 warm_start="$warm" \
      decompose="$decompose" study="issue12-two_pass-d128-causal-n4096-$mode" results_dir="$WORK/tune_$mode" \
      >>"$LOG" 2>&1
  echo "tuner $mode: exit $? after $((SECONDS - start)) s" | tee -a "$LOG"
done

python - "$WORK" "$OUT" >>"$LOG" 2>&1 <<'EOF'
import sys
from runners.tables.results import load
work, out = sys.argv[1:]
load(f"{work}/grid").to_parquet(f"{out}/grid.parquet", index=False)
load([f"{work}/tune_{mode}" for mode in ("cold", "warm", "joint")]).to_parquet(f"{out}/tune.parquet", index=False)
EOF
echo "tables: exit $?" | tee -a "$LOG"
python -m plots.study results="$OUT/tune.parquet" grid="$OUT/grid.parquet" out="$OUT" >>"$LOG" 2>&1
echo "plots.study: exit $?" | tee -a "$LOG"
rm -rf "$WORK"
echo
cat "$OUT/study_comparison.md" 2>/dev/null || echo "no comparison (see $LOG)"
