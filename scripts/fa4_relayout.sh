#!/usr/bin/env bash
# Re-lay FlashAttention-4's wheel parts (.fa4a/ .fa4b/ .fa4c/ from ../shared/fa4/fetch.sh) into smaller folders when
# the working tree has grown so that a 35 MB part no longer fits beside it in one device call (64 MiB in all):
#
#   bash scripts/fa4_relayout.sh [MB]    # default 26: .fa4p1/ .fa4p2/ ... each at most MB; the last holds the other
#                                        # wheels and the wheel's name; each, libs_cu13.parts (how many pieces to join)
#
# scripts/fa4_install.sh stages every .fa4*/ folder it finds and joins the pieces once all are staged (docs/fa4.md).
set -euo pipefail
mb=${1:-26}
for d in .fa4a .fa4b .fa4c; do [ -d "$d" ] || { echo "fa4_relayout: $d missing (run ../shared/fa4/fetch.sh first)" >&2; exit 2; }; done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cat .fa4a/libs_cu13.part.* .fa4b/libs_cu13.part.* .fa4c/libs_cu13.part.* > "$tmp/big.whl"
split -b "${mb}000000" "$tmp/big.whl" "$tmp/libs_cu13.part."
rm -rf .fa4p*; i=0
for piece in "$tmp"/libs_cu13.part.*; do i=$((i + 1)); mkdir -p ".fa4p$i"; mv "$piece" ".fa4p$i/"; done
last=".fa4p$i"
cp .fa4c/*.whl .fa4c/libs_cu13.name "$last/"
if [ "$(du -sb "$last" | cut -f1)" -gt "${mb}000000" ]; then  # the other wheels do not fit beside the last piece
  mkdir -p ".fa4p$((i + 1))"; mv "$last"/*.whl "$last/libs_cu13.name" ".fa4p$((i + 1))/"
fi
for d in .fa4p*; do echo "$i" > "$d/libs_cu13.parts"; done  # every folder says how many pieces to wait for
for d in .fa4p*; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
du -sh .fa4p*
