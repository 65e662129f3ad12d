#!/usr/bin/env bash
# Compile a design's kernels for sm90 under another Triton release than the installed one (no GPU needed), e.g. the
# GPU machines' 3.6 while CI has the newest: a venv beside the project's Python, sharing its packages but torch's
# Triton replaced by the requested version (downloaded once into the venv).
#
#   bash scripts/compile_check_triton.sh 3.6.0 --variant ws --head-dim 128 --causal
#
# Prints runners.compile_check's rows (registers, spills, shared memory per kernel) under that Triton.
set -euo pipefail
VERSION=${1:?usage: compile_check_triton.sh VERSION [runners.compile_check options]}
shift
VENV=${TMPDIR:-/tmp}/flash_bwd_triton-$VERSION
if ! "$VENV/bin/python" -c "import triton, sys; sys.exit(triton.__version__ != '$VERSION')" 2>/dev/null; then
  python3 -m venv --system-site-packages "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "triton==$VERSION"
fi
cd "$(dirname "$0")/.."
"$VENV/bin/python" -c "import triton; print('triton', triton.__version__)"
exec "$VENV/bin/python" -m runners.compile_check "$@"
