#!/usr/bin/env bash
# Score modifiers (issue 24) on one GPU: sliding windows, softcap and FLA's forget gate, every stock design that
# implements them against FlexAttention (score_mod / mask_mod + block mask) and FlashAttention-4 (window_size, softcap;
# no gate), causal, bf16, B1, H*D = 2048.
#
#   bash scripts/gpu_modifiers.sh 16k 64|128   # N 16k at one head dim: window 1024 / 4096, softcap 30, gate
#   bash scripts/gpu_modifiers.sh 4k           # N 4k (B4), windows 1024 / 4096, both head dims (the N-scaling check)
#   bash scripts/gpu_modifiers.sh table [TABLE ...]  # no GPU needed: per cell, best design / flex, and 16k / 4k times
#
# Tables: $OUT/<gpu>_modifiers_<part>.parquet (+ .log); copy them to results/<gpu>/modifiers/ and commit.
# Each sweep stops after SWEEP_TIMEOUT_S (default 260 s), all by 540 s (DEADLINE_EPOCH), so one part fits a 600 s
# device call; the rows written so far stay.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
PART=${1:?usage: gpu_modifiers.sh 16k 64|128 | 4k | table [TABLE ...]}
DESIGNS=${DESIGNS:-two_pass,atomic,fused,atomic_tma}  # every design with all three modifiers
WINDOWED=${WINDOWED:-$DESIGNS,ws}  # and the designs with windows and softcap but no gate (ws, Gluon)
SOFTCAPPED=${SOFTCAPPED:-$WINDOWED}
BASELINES=${BASELINES:-flex,fa4}  # window and softcap; the gate: flex only
COMMON=(batch=1 hidden=2048 causal=true dtype=bf16 bench.warmup=25 bench.rep=100)
GPU=$(python -c "import torch; n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''; \
print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')" 2>/dev/null || echo gpu)
export PREFIX=${GPU}_modifiers SWEEP_ID=modifiers SWEEP_TIMEOUT_S=${SWEEP_TIMEOUT_S:-260}
export DEADLINE_EPOCH=${DEADLINE_EPOCH:-$(( $(date +%s) + 540 ))}  # the sweeps stop here: merge + table fit 600 s
export SCRATCH=${TMPDIR:-/tmp}/flash_bwd_modifiers/$PART${2:+-$2}
mkdir -p "$OUT" "$SCRATCH"
# shellcheck source=scripts/sweep_parts.sh
source "$(dirname "$0")/sweep_parts.sh"

table() {  # $@: merged tables -> per cell: each design's TFLOPS and ms, best / flex; per window: ms(16k) / ms(4k)
  python - "$@" <<'PY'
import sys

import pandas as pd

from runners import tables as T

df = pd.concat([T.load(path) for path in sys.argv[1:]], ignore_index=True)
ok = df[T.is_result(df) & df["timing_meaningful"].astype(bool)]
cell = ["gpu_label", "seq", "head_dim", "modifiers"]
tflops = ok.pivot_table(index=cell, columns="variant", values="tflops", aggfunc="max")
ms = ok.pivot_table(index=cell, columns="variant", values="ms", aggfunc="min")
designs = [v for v in tflops if T.is_triton(v)]
tflops["best_design"] = tflops[designs].idxmax(axis=1)
for name in ("flex", "fa4"):
    tflops[f"x_{name}"] = tflops[designs].max(axis=1) / tflops.get(name, float("nan"))
pd.set_option("display.width", 250)
print(tflops.round(2).to_string())
per_sequence = ok.assign(seq_ms=ok["ms"] / ok["batch"])  # time of one sequence (the 4k part runs B4)
best_ms = per_sequence[per_sequence["variant"].isin(designs)].pivot_table(index=cell, values="seq_ms",
                                                                           aggfunc="min").squeeze(axis=1).unstack("seq")
if {4096, 16384} <= set(best_ms.columns):
    growth = (best_ms[16384] / best_ms[4096]).rename("ms per sequence 16k / 4k (best design; linear: 4.0)")
    print(growth.dropna().round(2).to_string())
failed = df[~T.is_result(df)]
if len(failed):
    print(failed[["variant", "seq", "head_dim", "modifiers", "status", "reason"]].to_string(index=False))
PY
}

case "$PART" in
  16k)
    D=${2:?usage: gpu_modifiers.sh 16k 64|128}
    run_part "16k_d$D" "${COMMON[@]}" seq=16384 head_dim="$D" variant="$WINDOWED" window=1024,4096 \
      -- "${COMMON[@]}" seq=16384 head_dim="$D" variant="$SOFTCAPPED" softcap=30 \
      -- "${COMMON[@]}" seq=16384 head_dim="$D" variant="$DESIGNS" gate=true \
      -- "${COMMON[@]}" seq=16384 head_dim="$D" variant="$BASELINES" window=1024,4096 point_timeout_s=120 \
      -- "${COMMON[@]}" seq=16384 head_dim="$D" variant="$BASELINES" softcap=30 point_timeout_s=120 \
      -- "${COMMON[@]}" seq=16384 head_dim="$D" variant=flex gate=true point_timeout_s=120
    table "$OUT/${PREFIX}_16k_d$D.parquet" | tee -a "$OUT/${PREFIX}_16k_d$D.log" ;;
  4k)
    # B4: the same tokens as N 16k at B1 (at B1 a 4k windowed backward is ~0.25 ms of kernels, and the host's launch
    # overhead showed in ws's and flex's do_bench times: kernel_ms_sum / ms 0.38 and 0.67)
    run_part 4k "${COMMON[@]}" batch=4 seq=4096 head_dim=64,128 variant="$WINDOWED" window=1024,4096 \
      -- "${COMMON[@]}" batch=4 seq=4096 head_dim=64,128 variant="$BASELINES" window=1024,4096 point_timeout_s=120
    table "$OUT/${PREFIX}_4k.parquet" | tee -a "$OUT/${PREFIX}_4k.log" ;;
  table)
    shift
    if [ $# -eq 0 ]; then set -- "$OUT"/*_modifiers_*.parquet; fi
    table "$@" ;;
  *) echo "gpu_modifiers.sh: unknown part $PART (16k 64|128, 4k, table)" >&2; exit 2 ;;
esac
