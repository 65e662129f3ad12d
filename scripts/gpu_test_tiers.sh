#!/usr/bin/env bash
# Wall time of the GPU test tiers, for the README (docs/testing.md).
#   scripts/gpu_test_tiers.sh fast   # `pytest -m "not slow"` from a COLD Triton cache (a fresh, empty TRITON_CACHE_DIR)
#   scripts/gpu_test_tiers.sh full   # the full suite (`pytest -q tests`, what CI runs), after `fast` on the same machine:
#                                 # its cache holds the fast tier's kernels, the rest compiles (the log says how warm)
#   ISSUE13_WORKERS=12 scripts/gpu_test_tiers.sh full   # the same across 12 pytest-xdist workers (`-n 12`; xdist is
#                                 # optional, not a dependency: the GPU image has it, CI does not use it)
# Run each as its own call (each stays under ~9.5 min). Writes to $OUT: tiers.log (one line per run, appended when
# $OUT is kept), fast.log / full.log (pytest output with the 30 slowest tests). Prints tiers.log last.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-fast}"
OUT="${OUT:-/tmp/flash-bwd-issue13-out}"
mkdir -p "$OUT"
CACHE="${ISSUE13_CACHE:-/tmp/flash-bwd-issue13-triton-cache}"
LIMIT_S="${ISSUE13_LIMIT_S:-560}"
# the test paths (default: all); the full suite outgrows one 10-minute device call cold, so it can be timed in
# parts, each from a cold cache (ISSUE13_COLD=1), and the parts added up
read -r -a PATHS <<< "${ISSUE13_PATHS:-tests}"
[ "${ISSUE13_COLD:-0}" = 1 ] && rm -rf "$CACHE"
WORKERS=()
if [ -n "${ISSUE13_WORKERS:-}" ]; then
  python -c "import xdist" 2>/dev/null || { echo "ISSUE13_WORKERS needs pytest-xdist" >&2; exit 2; }
  WORKERS=(-n "$ISSUE13_WORKERS")
fi

case "$MODE" in
  fast) rm -rf "$CACHE"; mkdir -p "$CACHE"; MARK=(-m "not slow"); STATE="cold" ;;
  full) mkdir -p "$CACHE"; MARK=(); STATE="$(find "$CACHE" -name '*.json' | wc -l | tr -d ' ') cached kernel files" ;;
  *) echo "usage: $0 fast|full" >&2; exit 2 ;;
esac

ENV_LINE="$(python - <<'EOF' 2>/dev/null
import torch, triton
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU (CPU interpreter)"
print(f"{name}, torch {torch.__version__}, triton {triton.__version__}")
EOF
)"
export TRITON_CACHE_DIR="$CACHE"
start=$(date +%s.%N)
timeout "$LIMIT_S" python -m pytest -q "${PATHS[@]}" "${MARK[@]}" "${WORKERS[@]}" -p no:cacheprovider --durations=30 > "$OUT/$MODE.log" 2>&1
rc=$?
end=$(date +%s.%N)
wall=$(python -c "print(f'{$end - $start:.0f}')")
summary="$(grep -E '^(=+ )?[0-9]+ (passed|failed)|passed|failed|error' "$OUT/$MODE.log" | tail -1 | sed 's/=//g; s/^ *//')"
[ "$rc" = 124 ] && summary="TIMED OUT after ${LIMIT_S} s; $summary"
LABEL="$MODE"
[ "${PATHS[*]}" = tests ] || LABEL="$LABEL (${#PATHS[@]} paths)"
[ ${#WORKERS[@]} -eq 0 ] || LABEL="$LABEL -n $ISSUE13_WORKERS"
printf '%-5s %-38s wall %5s s  rc %-3s %s | %s | commit %s\n' "$LABEL" "(cache: $STATE)" "$wall" "$rc" \
  "$summary" "$ENV_LINE" "${FLASH_BWD_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}" \
  >> "$OUT/tiers.log"

echo "--- slowest tests ($MODE) ---"
sed -n '/slowest 30 durations/,/^$/p' "$OUT/$MODE.log" | head -20
echo "--- tiers.log ---"
cat "$OUT/tiers.log"
exit 0
