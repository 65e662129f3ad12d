#!/usr/bin/env bash
# Issue 44 on one GPU, in one call of a few minutes: the GPU tests of the operator (tests/test_compile_gpu.py: the
# traced path must not change) and of the bound launches (tests/test_launch_gpu.py: warm eager calls bound, gradients
# as the operator path's), then runners.host_cost (host time of one eager forward + backward call, every design
# and baseline; Triton designs on the plan and the operator paths) on this checkout and, when git can export it, on
# the commit before launch plans (BASE, default 2b32816: runners/host_cost.py copied in, the operator its only path).
#
#   OUT=/some/folder bash scripts/gpu_host_cost.sh
#
# Knobs (environment): SEQS (128,1024), DTYPE (bf16), HEADS (16), HEAD_DIM (128), REP (200), WARMUP (20),
# VARIANTS (all), BASE (2b32816; empty: no before rows), BEFORE_DIR (that commit's tree exported beforehand, for a
# machine without git: `git archive 2b32816 | tar -x -C DIR`), TEST_BUDGET_S (240), TESTS (the pytest files run first;
# default tests/test_compile_gpu.py tests/test_launch_gpu.py; empty: none, e.g. on a second shape of the same lease).
# Writes $OUT/<gpu>_host_cost_tests.log, $OUT/<gpu>_host_cost.log, the rows under $OUT/results/<gpu>/host_cost{,_before}/
# and all of them merged into $OUT/<gpu>_host_cost.parquet; copy them to
# results/<gpu>/host_cost/ and commit. docs/host_cost.md.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
SEQS=${SEQS:-128,1024} DTYPE=${DTYPE:-bf16} HEADS=${HEADS:-16} HEAD_DIM=${HEAD_DIM:-128} REP=${REP:-200}
WARMUP=${WARMUP:-20} VARIANTS=${VARIANTS:-all} BASE=${BASE-2b32816} TEST_BUDGET_S=${TEST_BUDGET_S:-240}
TESTS=${TESTS-tests/test_compile_gpu.py tests/test_launch_gpu.py}
GPU=$(python -c "import torch; n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''; \
print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')" 2>/dev/null || echo gpu)
# shellcheck source=scripts/fa4_install.sh
source "$(dirname "$0")/fa4_install.sh"  # FlashAttention-4 on PYTHONPATH when carried (VARIANTS=all takes fa4)
mkdir -p "$OUT"
ARGS="variant=$VARIANTS seq=$SEQS dtype=$DTYPE heads=$HEADS kv_heads=$HEADS head_dim=$HEAD_DIM rep=$REP warmup=$WARMUP"

if [ -n "$TESTS" ]; then
  echo "+ pytest $TESTS (budget ${TEST_BUDGET_S}s)" | tee "$OUT/${GPU}_host_cost_tests.log"
  # shellcheck disable=SC2086  # TESTS is a list of files
  timeout "$TEST_BUDGET_S" python -m pytest -q -rs $TESTS 2>&1 | tee -a "$OUT/${GPU}_host_cost_tests.log" | tail -15
fi

echo "+ runners.host_cost $ARGS (this checkout)" | tee "$OUT/${GPU}_host_cost.log"
python -m runners.host_cost $ARGS results_dir="$OUT/results" sweep_id=host_cost 2>&1 | tee -a "$OUT/${GPU}_host_cost.log"

if [ -n "${BEFORE_DIR:-}" ] && [ -d "$BEFORE_DIR/runners" ]; then  # a tree exported beforehand (no git on the machine)
  BEFORE=${TMPDIR:-/tmp}/flash_bwd_before_tree
  rm -rf "$BEFORE" && cp -r "$BEFORE_DIR" "$BEFORE" && cp runners/host_cost.py "$BEFORE/runners/"
  BASE="$BASE (from $BEFORE_DIR)"
elif [ -n "$BASE" ] && git cat-file -e "$BASE^{commit}" 2>/dev/null; then
  BEFORE=${TMPDIR:-/tmp}/flash_bwd_before_$BASE
  rm -rf "$BEFORE" && mkdir -p "$BEFORE" && git archive "$BASE" | tar -x -C "$BEFORE"
  cp runners/host_cost.py "$BEFORE/runners/"
else
  BEFORE=
fi
if [ -n "$BEFORE" ]; then
  echo "+ runners.host_cost $ARGS (before launch plans: $BASE)" | tee -a "$OUT/${GPU}_host_cost.log"
  (cd "$BEFORE" && PYTHONPATH="$BEFORE:${PYTHONPATH:-}" python -m runners.host_cost $ARGS results_dir="$OUT/results" \
    sweep_id=host_cost_before) 2>&1 | tee -a "$OUT/${GPU}_host_cost.log"
else
  echo "no before rows: BASE='$BASE' is empty or not a commit here" | tee -a "$OUT/${GPU}_host_cost.log"
fi
# one flat table beside the logs (the device copies flat files back; the rows' own folders are too deep for it)
python -m runners.merge "$OUT/results" out="$OUT/${GPU}_host_cost.parquet" 2>&1 | tail -2 | tee -a "$OUT/${GPU}_host_cost.log"
