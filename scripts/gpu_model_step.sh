#!/usr/bin/env bash
# Issue 27 on one GPU, in one call of at most ~8 minutes (H100): the GPU tests of attention() as a PyTorch operator
# (tests/test_compile_gpu.py: fullgraph compile, gradients against eager, CUDA-graph replay, opcheck; every Triton
# design from the registry), then a small model-step sweep (runners.model_step: every design and baseline, eager and
# compiled with CUDA graphs; fa4 too when its wheels were carried, docs/fa4.md), merged into one flat table.
#
#   OUT=/some/folder bash scripts/gpu_model_step.sh
#
# Knobs (environment): MODEL (gpt_d64), SEQ (4096), STEPS (agreement steps, 30), MODES (eager,reduce-overhead),
# VARIANTS (all), POINT_TIMEOUT_S (0: none), TEST_BUDGET_S (240), TOTAL_BUDGET_S (470). Hydra is not needed; torch, triton, pandas, pyarrow and
# PyYAML are. Writes $OUT/<gpu>_model_step_tests.log, $OUT/<gpu>_model_step.parquet and .log; copy them to
# results/<gpu>/model_step/ and commit.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
MODEL=${MODEL:-gpt_d64} SEQ=${SEQ:-4096} STEPS=${STEPS:-30} MODES=${MODES:-eager,reduce-overhead} VARIANTS=${VARIANTS:-all}
POINT_TIMEOUT_S=${POINT_TIMEOUT_S:-0}  # per (variant, mode), compiles included (flex under reduce-overhead at N16k)
TEST_BUDGET_S=${TEST_BUDGET_S:-240} TOTAL_BUDGET_S=${TOTAL_BUDGET_S:-470}
START=$SECONDS
GPU=$(python -c "import torch; n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''; \
print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')" 2>/dev/null || echo gpu)
SCRATCH=${TMPDIR:-/tmp}/flash_bwd_model_step
# shellcheck source=scripts/fa4_install.sh
source "$(dirname "$0")/fa4_install.sh"  # FlashAttention-4 on PYTHONPATH when carried (VARIANTS=all takes fa4)
mkdir -p "$OUT" "$SCRATCH"
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))" \
  | tee "$OUT/${GPU}_model_step_tests.log"

echo "+ pytest tests/test_compile_gpu.py (budget ${TEST_BUDGET_S}s)" | tee -a "$OUT/${GPU}_model_step_tests.log"
timeout "$TEST_BUDGET_S" python -m pytest -q -rs tests/test_compile_gpu.py 2>&1 | tee -a "$OUT/${GPU}_model_step_tests.log" | tail -25

LEFT=$((TOTAL_BUDGET_S - (SECONDS - START)))
echo "+ runners.model_step model=$MODEL seq=$SEQ steps=$STEPS compile=$MODES variant=$VARIANTS (budget ${LEFT}s)" \
  | tee "$OUT/${GPU}_model_step.log"
timeout "$LEFT" python -m runners.model_step model="$MODEL" seq="$SEQ" steps="$STEPS" compile="$MODES" \
  variant="$VARIANTS" point_timeout="$POINT_TIMEOUT_S" results_dir="$SCRATCH" sweep_id="model_step_$MODEL" 2>&1 | tee -a "$OUT/${GPU}_model_step.log"
python -m runners.merge "$SCRATCH" out="$OUT/${GPU}_model_step.parquet" 2>&1 | tee -a "$OUT/${GPU}_model_step.log"
python - "$OUT/${GPU}_model_step.parquet" <<'PY' 2>&1 | tee -a "$OUT/${GPU}_model_step.log"
import sys

import pandas as pd

df = pd.read_parquet(sys.argv[1])
df = df[df.get("bench_kind", pd.Series(dtype=str)) == "model_step"]
cols = [c for c in ("variant", "compile_mode", "status", "ms", "attn_bwd_ms", "attn_bwd_share", "loss_max_dev",
                    "loss_tol", "loss_last", "reason") if c in df]
pd.set_option("display.width", 250)
pd.set_option("display.max_colwidth", 80)
print(df[cols].sort_values(["compile_mode", "ms"]).round(4).to_string(index=False))
PY
echo "done in $((SECONDS - START)) s"
