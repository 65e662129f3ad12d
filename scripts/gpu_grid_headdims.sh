#!/usr/bin/env bash
# On one GPU (run it on an H100 and on an H200; written for issue 9): accuracy-gated runner rows for the Hopper design and the
# large head dims, and the issue's targets checked on them.
#
#   bash scripts/gpu_grid_headdims.sh grid bf16   # FA grid (N 1k/4k/16k x D 64/128 x causal/not): every flash-bwd design
#   bash scripts/gpu_grid_headdims.sh grid fp16   #   + atomic_tma deterministic + FA2, cuDNN, flex, FA4 (~5-6 min each)
#   bash scripts/gpu_grid_headdims.sh headdims    # B2 H16 N4096, D 96/192/256, causal and not, bf16, every variant (~4 min)
#   bash scripts/gpu_grid_headdims.sh targets [TABLE ...]   # no GPU needed: the targets on merged tables (default: $OUT's)
#
# Tables: $OUT/<gpu>_issue9_<part>.parquet (+ .log), <gpu> = h100 / h200 / gpu. Copy them to results/<gpu>/ and
# commit before the targets step. The targets (issue 9): on the grid, the best flash-bwd design >= 1.0x flex and
# >= 1.3x FA2 on every cell and >= 0.90x cuDNN on every cell with N >= 4096; at D 96/192/256 (N 4096) >= FA2;
# the atomic family (atomic, atomic_tma, either mode) >= 0.9x two_pass on every grid cell.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
PART=${1:?usage: gpu_grid_headdims.sh grid bf16|fp16 | headdims | targets [TABLE ...]}
DESIGNS=two_pass,fused,atomic,atomic_tma
BASELINES=sdpa_flash,sdpa_cudnn,flex,fa4
GRID=(tokens=16384 hidden=2048 seq=1024,4096,16384 head_dim=64,128 causal=true,false)
GPU=$(python -c "import torch; n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''; \
print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')" 2>/dev/null || echo gpu)
PREFIX=${GPU}_issue9 SWEEP_ID=issue9
SCRATCH=${TMPDIR:-/tmp}/flash_bwd_issue9/$PART${2:+-$2}
mkdir -p "$OUT" "$SCRATCH"
# shellcheck source=scripts/sweep_parts.sh
source "$(dirname "$0")/sweep_parts.sh"

targets() {  # $@: merged tables
  python - "$@" <<'EOF'
import sys

import pandas as pd

from runners import tables as T

df = pd.concat([T.load(path) for path in sys.argv[1:]], ignore_index=True)
ok = df[(df["status"] == "ok") & df["timing_meaningful"].astype(bool)].copy()
ok["design"] = ok["variant"]  # T.load names the deterministic mode: "<variant>+deterministic"
shape = ["gpu_name", "dtype", "batch", "heads", "kv_heads", "seq", "head_dim", "causal"]
best = ok.groupby(shape + ["design"])["tflops"].max().unstack("design")  # fastest correct config per design
flash = [c for c in best if c.split("+")[0] in ("two_pass", "fused", "atomic", "atomic_tma")]
best["best_design"] = best[flash].idxmax(axis=1)
best["best"] = best[flash].max(axis=1)
for name in ("sdpa_flash", "sdpa_cudnn", "flex", "fa4"):
    best[f"x_{name}"] = best["best"] / best[name] if name in best else float("nan")
atomics = [c for c in best if c.split("+")[0] in ("atomic", "atomic_tma")]
best["x_atomic_vs_two_pass"] = best[atomics].max(axis=1) / best["two_pass"] if "two_pass" in best else float("nan")
best = best.reset_index()
fa_grid = best["seq"].isin([1024, 4096, 16384]) & (best["heads"] == best["kv_heads"])
grid = best[fa_grid & best["head_dim"].isin([64, 128])]
large = best[best["head_dim"].isin([96, 192, 256]) & (best["seq"] == 4096)]
checks = [
    ("grid: best >= 1.0x flex", grid, "x_flex", 1.0),
    ("grid: best >= 1.3x FA2", grid, "x_sdpa_flash", 1.3),
    ("grid N>=4096: best >= 0.90x cuDNN", grid[grid["seq"] >= 4096], "x_sdpa_cudnn", 0.90),
    ("grid: atomic family >= 0.9x two_pass", grid, "x_atomic_vs_two_pass", 0.9),
    ("D 96/192/256: best >= FA2", large, "x_sdpa_flash", 1.0),
]
pd.set_option("display.width", 250)
cols = shape[1:] + ["best_design", "best", "x_sdpa_flash", "x_sdpa_cudnn", "x_flex", "x_fa4",
                                       "x_atomic_vs_two_pass"]
for gpu, rows in best.groupby("gpu_name"):
    print(f"\n{gpu}")
    print(rows[cols].round(3).to_string(index=False))
print()
for label, rows, col, target in checks:
    for gpu, part in rows.groupby("gpu_name"):
        values = part[col].dropna()
        if values.empty:
            print(f"{'NO DATA':<7} {label} [{gpu}]")
            continue
        worst = part.loc[values.idxmin()]
        verdict = "PASS" if values.min() >= target else "MISS"
        print(f"{verdict:<7} {label} [{gpu}]: min {values.min():.3f} (D{worst['head_dim']} N{worst['seq']} "
              f"{'causal ' if worst['causal'] else ''}{worst['dtype']}), {int((values >= target).sum())}/{len(values)} cells")
EOF
}

case "$PART" in
  grid)
    DTYPE=${2:?usage: gpu_grid_headdims.sh grid bf16|fp16}
    run_part "grid_$DTYPE" "${GRID[@]}" dtype="$DTYPE" variant=$DESIGNS,$BASELINES \
      -- "${GRID[@]}" dtype="$DTYPE" variant=atomic_tma blocks.deterministic=true
    targets "$OUT/${PREFIX}_grid_$DTYPE.parquet" | tail -8 ;;
  headdims)
    run_part headdims batch=2 heads=16 seq=4096 head_dim=96,192,256 causal=true,false dtype=bf16 \
      variant=$DESIGNS,$BASELINES
    targets "$OUT/${PREFIX}_headdims.parquet" | tail -3 ;;
  targets)
    shift
    if [ $# -eq 0 ]; then set -- "$OUT"/*_issue9_*.parquet; fi
    targets "$@" 2>&1 | tee "$OUT/issue9_targets.log" ;;
  *)
    echo "unknown part $PART: grid bf16|fp16 | headdims | targets [TABLE ...]"; exit 2 ;;
esac
