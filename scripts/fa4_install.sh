#!/usr/bin/env bash
# FlashAttention-4 (flash-attn-4, the `fa4` baseline) on a GPU machine without a package index, from the wheel parts
# that ../shared/fa4/fetch.sh lays out in .fa4a/ .fa4b/ .fa4c/ at the repository root (git-ignored; ~100 MB in all,
# so each part travels in its own device call: docs/fa4.md).
#
#   bash scripts/fa4_install.sh      # stages the parts found here in $FA4_STAGE (/tmp/fa4w); once all three are staged,
#                                    # installs the wheels into $FA4_SITE (/tmp/fa4site); prints the export line
#   source scripts/fa4_install.sh    # the same, then exports PYTHONPATH (scripts/sweep_parts.sh sources it)
#
# Parts staged by earlier calls on the same machine count, and an installed $FA4_SITE is used as it is. Without the
# parts it prints one line and exits 0 (sourced: returns 0, the shell unchanged): fa4 points are then `unsupported`.
# Without an NVIDIA GPU (no nvidia-smi: a CPU machine making tables) it does nothing.
FA4_SITE=${FA4_SITE:-/tmp/fa4site}
FA4_STAGE=${FA4_STAGE:-/tmp/fa4w}
FA4_PATHS="$FA4_SITE:$FA4_SITE/nvidia_cutlass_dsl/dsl_packages"  # --target skips the DSL wheel's .pth: its path here

_fa4_install() {
  local root part missing=()
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  [ -d "$FA4_SITE/flash_attn/cute" ] && return 0  # installed by an earlier call
  command -v nvidia-smi > /dev/null || return 3  # no NVIDIA GPU here (a table-only run): nothing to install
  for part in "$root"/.fa4*/; do  # .fa4a .fa4b .fa4c (fetch.sh) or .fa4p1 ... (fa4_relayout.sh)
    if [ -d "$part" ]; then
      mkdir -p "$FA4_STAGE" && cp "$part"* "$FA4_STAGE/" || return 1
    fi
  done
  local name="$FA4_STAGE/libs_cu13.name"  # .fa4c: the big wheel's file name, its last part and the other wheels
  local assembled=false
  [ -f "$name" ] && [ -f "$FA4_STAGE/$(cat "$name")" ] && assembled=true
  local pieces="$FA4_STAGE/libs_cu13.parts"  # fa4_relayout.sh: how many pieces the wheel was cut into
  if [ -f "$pieces" ]; then
    local staged
    staged=$(find "$FA4_STAGE" -maxdepth 1 -name 'libs_cu13.part.*' | wc -l)
    $assembled || [ "$staged" -eq "$(cat "$pieces")" ] || missing+=("$(( $(cat "$pieces") - staged )) of .fa4p*")
    [ -f "$name" ] || missing+=("the .fa4p* with the wheels")
  else
    $assembled || [ -f "$FA4_STAGE/libs_cu13.part.aa" ] || missing+=(.fa4a)
    $assembled || [ -f "$FA4_STAGE/libs_cu13.part.ab" ] || missing+=(.fa4b)
    [ -f "$name" ] || missing+=(.fa4c)
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "fa4: flash-attn-4 not installed: parts ${missing[*]} are neither here nor in $FA4_STAGE (carry each in" \
      "its own call on one warm machine: docs/fa4.md); fa4 points will be unsupported" >&2
    return 2
  fi
  if ! $assembled; then
    cat "$FA4_STAGE"/libs_cu13.part.* > "$FA4_STAGE/$(cat "$name")" && rm "$FA4_STAGE"/libs_cu13.part.* || return 1
  fi
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$FA4_SITE" "$FA4_STAGE"/*.whl || return 1
  echo "fa4: flash-attn-4 installed into $FA4_SITE" >&2
}

_fa4_install
case $? in
  0) if [ "${BASH_SOURCE[0]}" != "$0" ]; then  # sourced: export once (sourcing it again adds nothing)
       case ":${PYTHONPATH:-}:" in
         *":$FA4_SITE:"*) ;;
         *) export PYTHONPATH="$FA4_PATHS${PYTHONPATH:+:$PYTHONPATH}" ;;
       esac
     else
       echo "export PYTHONPATH=$FA4_PATHS:\$PYTHONPATH"
     fi ;;
  3) ;;  # no GPU: fa4 points (if any) are unsupported rows that say so
  1) echo "fa4: installing flash-attn-4 from $FA4_STAGE failed (see above); fa4 points will be unsupported" >&2
     [ "${BASH_SOURCE[0]}" != "$0" ] || exit 1 ;;
esac
unset -f _fa4_install
true
