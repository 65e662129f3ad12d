#!/usr/bin/env bash
# The Gluon designs on one sm90 GPU (H100 / H200): their GPU tests, then accuracy-gated runner rows on the FA grid
# next to two_pass, FA2, cuDNN and FA4, and a per-cell table of the best flash-bwd design against cuDNN, FA2 and FA4.
#
#   bash scripts/gpu_gluon.sh tests              # tests/test_ws.py, every case (slow ones too)
#   bash scripts/gpu_gluon.sh grid bf16|fp16     # FA grid (N 1k/4k/16k x D 64/128 x causal/not)
#   bash scripts/gpu_gluon.sh table [TABLE ...]  # no GPU needed: the per-cell table (default: $OUT's grid tables)
#   bash scripts/gpu_gluon.sh large_d [bf16|fp16] # B2 H16 N4096 D96/192/256: ws (both modes), ws_two_pass, two_pass,
#                                                #   FA2, cuDNN, FA4, and the best design against cuDNN per cell
#   bash scripts/gpu_gluon.sh cases [bf16|fp16]  # issue 40's other shapes, every design beside cuDNN, FA2 and FA4: GQA
#                                                #   B4 N4096 H32/Hkv8 D128 and H32/Hkv4 D64, a packed batch (log-normal
#                                                #   documents, 16k tokens, D128), a window (1024) and a softcap (30), causal
#                                                #   (CASE_SHAPES="window softcap": a subset of gqa gqa64 packed window softcap)
#   bash scripts/gpu_gluon.sh group_split [bf16] # issue 43: ws's group_split (1 2 4, fp32 / 16-bit partials) on the GQA
#                                                #   cells (B4 N4096 H32/Hkv4 D64, H32/Hkv8 D128, causal and not) beside FA4
#                                                #   and cuDNN: the A/B of results/h100/gluon/ab_issue43/group_split
#   bash scripts/gpu_gluon.sh ab DIR [bf16]      # ws on the FA grid from this checkout and from the tree in DIR (an older
#                                                #   commit, `git archive`d there), one table: the A/B of a refactor
#                                                #   (VARIANTS_AB: designs; AB_EXTRA: more sweeps, "-- key=value ...")
#   bash scripts/gpu_gluon.sh utilization        # every Triton / Gluon design, bench.ncu=true: Nsight Compute columns
#   bash scripts/gpu_gluon.sh ncu D [ARGS ...]   # Nsight Compute on ws's kernel, B4 H16 N4096 head dim D (ARGS: more
#                                                #   scripts/ncu_backward.py options): per-SASS-line stall samples
#                                                #   ($OUT/ncu_<tag>_sass.csv), the details page and a top-stalls summary
#   bash scripts/gpu_gluon.sh ncu_compare D [ARGS ...]  # the main backward kernel of each of NCU_DESIGNS (default
#                                                #   sdpa_cudnn,ws,fa4; the longest kernel of a backward run, found by a
#                                                #   first cheap ncu pass), same shape, Nsight Compute's full set with
#                                                #   source counters: every raw metric as one flat table
#                                                #   ($OUT/<gpu>_ncu_compare_<tag>.parquet: design, kernel, metric, unit,
#                                                #   value), each kernel's per-SASS-line counters
#                                                #   ($OUT/ncu_<tag>_<design>_sass.csv.gz) and one log ($OUT/ncu_<tag>.log)
#
# Tables: $OUT/<gpu>_gluon_<part>.parquet (+ .log); copy them to results/<gpu>/ and commit.
set -uo pipefail
OUT=${OUT:?set OUT to the output folder}
NCU_DESIGNS=${NCU_DESIGNS:-sdpa_cudnn,ws,fa4}
PART=${1:?usage: gpu_gluon.sh tests | grid bf16|fp16 | table [TABLE ...]}
VARIANTS=${VARIANTS:-ws,two_pass,sdpa_flash,sdpa_cudnn,fa4}  # VARIANTS=ws BLOCKS="blocks.num_stages=2,3": a tile study
read -r -a BLOCKS <<< "${BLOCKS:-}"
GRID=(tokens=16384 hidden=2048 seq=${SEQS:-1024,4096,16384} head_dim=${HEAD_DIMS:-64,128} causal=${CAUSALS:-true,false})
GPU=$(python -c "import torch; n = torch.cuda.get_device_name(0) if torch.cuda.is_available() else ''; \
print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')" 2>/dev/null || echo gpu)
PREFIX=${GPU}_gluon SWEEP_ID=gluon
SCRATCH=${TMPDIR:-/tmp}/flash_bwd_gluon/$PART${2:+-$2}${TAG:+-$TAG}  # one folder per table: merge reads all of it
mkdir -p "$OUT" "$SCRATCH"
# shellcheck source=scripts/sweep_parts.sh
source "$(dirname "$0")/sweep_parts.sh"

table() {  # $@: merged tables -> per cell: best flash-bwd design, ws, cuDNN, FA2, FA4 and the ratios
  python - "$@" <<'PY'
import sys

import pandas as pd

from runners import tables as T
from variants import get
from variants.base import TritonVariant

df = pd.concat([T.load(path) for path in sys.argv[1:]], ignore_index=True)
ok = df[(df["status"] == "ok") & df["timing_meaningful"].astype(bool)].copy()
shape = ["gpu_name", "dtype", "seq", "head_dim", "causal"]
best = ok.groupby(shape + ["variant"])["tflops"].max().unstack("variant")
flash = [c for c in best if isinstance(get(c.split("+")[0]), TritonVariant)]  # every design, from the registry
if not flash:
    sys.exit("table: no flash-bwd design has ok rows in these tables")
best = best.dropna(subset=flash, how="all")  # cells with only baselines measured: nothing to rank
best["best_design"] = best[flash].idxmax(axis=1)
best["best"] = best[flash].max(axis=1)
for name in ("sdpa_cudnn", "sdpa_flash", "fa4"):
    best[f"x_{name}"] = best["best"] / best[name] if name in best else float("nan")
pd.set_option("display.width", 250)
print(best.reset_index().drop(columns="gpu_name").round(3).to_string(index=False))
configs = ok[ok["variant"].map(lambda v: v.split("+")[0]).isin(flash)].copy()  # every measured config of a design
configs["config"] = configs.apply(lambda r: T.blocks_text(T.row_blocks(r)), axis=1)
print(configs.pivot_table(index=["variant", "config"], columns=shape[1:], values="tflops", aggfunc="max").round(1)
      .to_string())
PY
}

case "$PART" in
  tests)
    python -m pytest -q tests/test_ws.py --maxfail=4 2>&1 | tee "$OUT/${PREFIX}_tests.log" | tail -30 ;;
  grid)
    DTYPE=${2:?usage: gpu_gluon.sh grid bf16|fp16}
    run_part "grid_$DTYPE${TAG:+_$TAG}" "${GRID[@]}" dtype="$DTYPE" variant="$VARIANTS" "${BLOCKS[@]}" > /dev/null
    grep -E "wrong|crashed|timeout|error|KERNEL-SUM" "$OUT/${PREFIX}_grid_$DTYPE${TAG:+_$TAG}.log" | head -20
    table "$OUT/${PREFIX}_grid_$DTYPE${TAG:+_$TAG}.parquet" ;;
  large_d)  # D96 / D192 / D256 at B2 H16 N4096 (issue 25): both Gluon designs (ws in both modes) next to two_pass, FA2,
    # cuDNN and FA4; the per-cell table of the best design against cuDNN
    DTYPE=${2:-bf16}
    LARGE_D=${VARIANTS_LARGE_D:-ws,ws_two_pass,two_pass,sdpa_flash,sdpa_cudnn,fa4}
    run_part "large_d_$DTYPE${TAG:+_$TAG}" batch=2 heads=16 seq=${SEQS:-4096} head_dim=${HEAD_DIMS:-96,192,256} \
      causal=false,true dtype="$DTYPE" variant="$LARGE_D" \
      -- batch=2 heads=16 seq=${SEQS:-4096} head_dim=${HEAD_DIMS:-96,192,256} causal=false,true dtype="$DTYPE" \
      variant=ws blocks.deterministic=true > /dev/null
    grep -E "wrong|crashed|timeout|error|KERNEL-SUM" "$OUT/${PREFIX}_large_d_$DTYPE${TAG:+_$TAG}.log" | head -20
    table "$OUT/${PREFIX}_large_d_$DTYPE${TAG:+_$TAG}.parquet" ;;
  cases)  # issue 40: GQA (two shapes), one packed batch, one window, one softcap; every design that takes each, baselines
    DTYPE=${2:-bf16}
    CASES=${VARIANTS_CASES:-ws,ws_two_pass,two_pass,atomic_tma,sdpa_flash,sdpa_cudnn,fa4}
    read -r -a SHAPES <<< "${CASE_SHAPES:-gqa gqa64 packed window softcap}"  # CASE_SHAPES="window softcap": a subset
    SWEEPS=()
    for shape in "${SHAPES[@]}"; do
      [ ${#SWEEPS[@]} -gt 0 ] && SWEEPS+=(--)
      case "$shape" in
        gqa) SWEEPS+=(batch=4 seq=4096 heads=32 kv_heads=8 head_dim=128 causal=false,true variant="$CASES") ;;
        gqa64) SWEEPS+=(batch=4 seq=4096 heads=32 kv_heads=4 head_dim=64 causal=false,true variant="$CASES") ;;
        packed) SWEEPS+=(varlen=lognormal seq=2048 tokens=16384 hidden=2048 head_dim=128 causal=true variant="$CASES,flex") ;;
        window) SWEEPS+=(batch=1 seq=16384 hidden=2048 head_dim=128 causal=true window=1024 variant="$CASES,flex") ;;
        softcap) SWEEPS+=(batch=1 seq=16384 hidden=2048 head_dim=128 causal=true softcap=30 variant="$CASES,flex") ;;
        *) echo "cases: unknown CASE_SHAPES entry '$shape' (gqa gqa64 packed window softcap)"; exit 2 ;;
      esac
      SWEEPS+=(dtype="$DTYPE")
    done
    run_part "cases_$DTYPE${TAG:+_$TAG}" "${SWEEPS[@]}" \
      > /dev/null
    grep -E "wrong|crashed|timeout|error|KERNEL-SUM" "$OUT/${PREFIX}_cases_$DTYPE${TAG:+_$TAG}.log" | head -20
    python - "$OUT/${PREFIX}_cases_$DTYPE${TAG:+_$TAG}.parquet" <<'PY'
import sys

import pandas as pd

df = pd.read_parquet(sys.argv[1])
df["case"] = df.apply(lambda r: (f"H{r['heads']}/{r['kv_heads']} D{r['head_dim']}" if r["heads"] != r["kv_heads"] else
                                 f"packed D{r['head_dim']}" if str(r.get("varlen_dist", "none")) not in ("none", "None", "nan") else
                                 f"window {r['window_left']:.0f}" if r.get("window_left", -1) >= 0 else
                                 f"softcap {r['softcap']:g}") + (" causal" if r["causal"] else ""), axis=1)
ok = df[df["status"] == "ok"]
pd.set_option("display.width", 250)
print(ok.pivot_table(index="case", columns="variant", values="tflops", aggfunc="max").round(1).to_string())
print(df[df["status"] != "ok"].groupby(["variant", "status"]).size().to_string())
PY
    ;;
  group_split)  # issue 43: ws's GQA split beside FA4 and cuDNN; the baselines first, then each config
    DTYPE=${2:-bf16}
    G64=(batch=4 seq=4096 heads=32 kv_heads=4 head_dim=64 causal=false,true dtype="$DTYPE")
    G128=(batch=4 seq=4096 heads=32 kv_heads=8 head_dim=128 causal=false,true dtype="$DTYPE")
    run_part "group_split_$DTYPE${TAG:+_$TAG}" "${G64[@]}" variant=fa4,sdpa_cudnn -- "${G128[@]}" variant=fa4,sdpa_cudnn \
      -- "${G64[@]}" variant=ws blocks.group_split=1,2,4 blocks.fp32_partials=true,false \
      -- "${G128[@]}" variant=ws blocks.group_split=1,2,4 blocks.fp32_partials=true,false > /dev/null
    grep -E "wrong|crashed|timeout|error" "$OUT/${PREFIX}_group_split_$DTYPE${TAG:+_$TAG}.log" | head -20
    table "$OUT/${PREFIX}_group_split_$DTYPE${TAG:+_$TAG}.parquet" ;;
  ab)  # ws on the FA grid, this checkout and the tree in $2 (git archive of an older commit), one table
    DIR=${2:?usage: gpu_gluon.sh ab DIR [bf16|fp16]}; DTYPE=${3:-bf16}
    AB=${VARIANTS_AB:-ws}
    read -r -a EXTRA <<< "${AB_EXTRA:-}"  # more sweeps: "-- batch=1 seq=16384 ... softcap=30" (same in both trees)
    run_part "ab_$DTYPE${TAG:+_$TAG}" "${GRID[@]}" dtype="$DTYPE" variant="$AB" "${EXTRA[@]}" > /dev/null
    (cd "$DIR" && SCRATCH="$SCRATCH-before" PREFIX="${PREFIX}_before" OUT="$OUT" \
      bash -c "source scripts/sweep_parts.sh; run_part ab_$DTYPE ${GRID[*]} dtype=$DTYPE variant=$AB ${EXTRA[*]}" \
      > /dev/null)
    python - "$OUT/${PREFIX}_ab_$DTYPE${TAG:+_$TAG}.parquet" "$OUT/${PREFIX}_before_ab_$DTYPE.parquet" <<'PY'
import sys

import pandas as pd

after, before = (pd.read_parquet(path) for path in sys.argv[1:3])
key = [c for c in ["variant", "batch", "heads", "kv_heads", "seq", "head_dim", "causal", "softcap", "window_left",
                   "varlen_dist"] if c in after and c in before]
both = after[after.status == "ok"].merge(before[before.status == "ok"], on=key, suffixes=("", "_before"))
both["after_over_before"] = both["tflops"] / both["tflops_before"]
print(both[key + ["tflops_before", "tflops", "after_over_before"]].round(3).to_string(index=False))
print(f"after / before: median {both.after_over_before.median():.3f}, min {both.after_over_before.min():.3f}, "
      f"max {both.after_over_before.max():.3f} over {len(both)} cells; "
      f"not ok: {int((after.status != 'ok').sum())} after, {int((before.status != 'ok').sum())} before")
PY
    ;;
  utilization)  # every Triton / Gluon design (both ws modes) with bench.ncu=true: the Nsight Compute columns
    run_part "utilization${TAG:+_$TAG}" batch=4 heads=16 seq=${SEQS:-4096} head_dim=${HEAD_DIMS:-128} causal=false,true \
      dtype=bf16 resume=false bench.ncu=true variant="${VARIANTS_NCU:-two_pass,atomic,fused,atomic_tma,ws,ws_two_pass}" \
      -- batch=4 heads=16 seq=${SEQS:-4096} head_dim=${HEAD_DIMS:-128} causal=false,true dtype=bf16 resume=false \
      bench.ncu=true variant=ws blocks.deterministic=true > /dev/null
    python - "$OUT/${PREFIX}_utilization${TAG:+_$TAG}.parquet" <<'PY'
import sys

import pandas as pd

df = pd.read_parquet(sys.argv[1])
cols = ["variant", "deterministic", "causal", "status", "tflops", "top_kernel", "top_kernel_tensor_pct",
        "top_kernel_dram_pct", "ncu_tensor_pct", "ncu_note"]
pd.set_option("display.width", 250, "display.max_colwidth", 120)
print(df[[c for c in cols if c in df]].to_string(index=False))
PY
    ;;
  ncu)
    shift
    TAG="d$1$(echo "${*:2}" | tr -cd 'a-z0-9')"
    ncu --kernel-name regex:_ws_backward --launch-skip 2 --launch-count 1 --set full --import-source yes \
      -o "$SCRATCH/$TAG" python scripts/ncu_backward.py --head-dim "$@" > "$OUT/ncu_${TAG}.log" 2>&1
    ncu -i "$SCRATCH/$TAG.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${TAG}_sass.csv"
    ncu -i "$SCRATCH/$TAG.ncu-rep" --page details --print-details all > "$OUT/ncu_${TAG}_details.txt"
    grep -E "^    (Duration|Compute \(SM\) Throughput|Issued Ipc Active|Warp Cycles Per Issued)" "$OUT/ncu_${TAG}_details.txt" ;;
  ncu_compare)
    shift
    TAG="d$1$(echo "${*:2}" | tr -cd 'a-z0-9')"
    for design in ${NCU_DESIGNS//,/ }; do
      # pass 1: every kernel of three backward runs with its duration; the longest one is the design's main kernel
      ncu --metrics gpu__time_duration.sum --csv python scripts/ncu_backward.py --variant "$design" --head-dim "$@" \
        > "$SCRATCH/${TAG}_${design}_kernels.csv" 2> "$SCRATCH/${TAG}_${design}_pass1.log"
      read -r kernel skip < <(python - "$SCRATCH/${TAG}_${design}_kernels.csv" <<'PY'
import io, sys

import pandas as pd

text = open(sys.argv[1]).read()
table = pd.read_csv(io.StringIO(text[text.index('"ID"'):]))  # ncu's CSV follows the program's own output
table = table[table["Metric Name"] == "gpu__time_duration.sum"]
table["value"] = pd.to_numeric(table["Metric Value"].astype(str).str.replace(",", ""), errors="coerce")
base = table["Kernel Name"].str.split("(").str[0].str.split("<").str[0].str.strip()
name = base.loc[table.groupby(base)["value"].sum().idxmax() == base].iloc[0]  # most time over the runs
print(name.split()[-1].split("::")[-1], (base == name).sum() - 1)  # profile its last launch
PY
)
      echo "$design: main kernel $kernel (launch-skip $skip)" | tee -a "$OUT/ncu_${TAG}.log"
      [ -n "$kernel" ] || continue
      ncu --kernel-name "regex:$kernel" --launch-skip "$skip" --launch-count 1 --set full --import-source yes \
        -o "$SCRATCH/${TAG}_$design" python scripts/ncu_backward.py --variant "$design" --head-dim "$@" \
        > "$SCRATCH/${TAG}_$design.log" 2>&1
      # one log per shape and one gzipped SASS table per design come back (the device returns at most 8 files)
      { echo "== $design: pass 1 (stderr, last lines)"; tail -5 "$SCRATCH/${TAG}_${design}_pass1.log"
        echo "== $design: full set"; cat "$SCRATCH/${TAG}_$design.log"; } >> "$OUT/ncu_${TAG}.log"
      ncu -i "$SCRATCH/${TAG}_$design.ncu-rep" --page raw --csv > "$SCRATCH/${TAG}_$design.csv"
      ncu -i "$SCRATCH/${TAG}_$design.ncu-rep" --page source --csv --print-source sass \
        | gzip > "$OUT/ncu_${TAG}_${design}_sass.csv.gz"
    done
    python - "$OUT/${GPU}_ncu_compare_$TAG.parquet" $(for d in ${NCU_DESIGNS//,/ }; do echo "$SCRATCH/${TAG}_$d.csv"; done) <<'PY'
import io, os, sys

import pandas as pd

rows = []
for path in sys.argv[2:]:
    raw = pd.read_csv(path)  # row 0: units, row 1: the profiled kernel
    units, values = raw.iloc[0], raw.iloc[1]
    if not os.path.exists(path):
        continue
    design = os.path.basename(path)[:-4].split("_", 1)[1]
    for metric in raw.columns:
        rows.append(dict(design=design, kernel=str(values.get("Kernel Name", ""))[:80], metric=metric,
                         unit=str(units[metric]), value=str(values[metric])))
table = pd.DataFrame(rows)
table.to_parquet(sys.argv[1])
wide = table.pivot_table(index="metric", columns="design", values="value", aggfunc="first")
keep = wide.index.str.contains("gpu__time_duration.sum|pipe_tensor|gmma|sm__throughput.avg.pct|"
                               "mem_shared.*pct|issue_active.avg.pct|warp_issue_stalled.*per_warp_active", regex=True)
pd.set_option("display.width", 250)
print(wide[keep].to_string())
PY
    ;;
  table)
    shift
    if [ $# -eq 0 ]; then set -- "$OUT"/*_gluon_grid_*.parquet; fi
    table "$@" ;;
  *)
    echo "unknown part $PART: tests | grid bf16|fp16 | table [TABLE ...]"; exit 2 ;;
esac
