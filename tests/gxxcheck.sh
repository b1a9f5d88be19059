#!/usr/bin/env bash
# gxxcheck.sh — syntax check of the device library without nvcc: g++
# -fsyntax-only (C++17, -Wall -Wextra) over every generated translation
# unit, against the CUDA stubs in tests/gxxstub, once for the host pass
# and once per device arch (__CUDA_ARCH__), so that the templates of each
# unit are instantiated as the device pass would. It catches C++ errors
# (names, types, template instantiation) and g++'s warnings; it does not
# catch what only nvcc knows (device/host calls, PTX, registers): that is
# tests/devcheck.sh, on a machine with nvcc.
#
# Usage: bash tests/gxxcheck.sh [--only GLOB] [--define NAME=VALUE ...] [arch ...]
#   --only GLOB   only the units whose file name (without .cu) matches
#   --define D    also pass -DD, e.g. --define NG_TRACE=1 (repeatable)
#   arch ...      __CUDA_ARCH__ values (default: 800 900 1000)
# Environment: GENDIR (default: <repo>/generated), CXX (default: g++).
# Exit status: 0 clean; 1 on any warning or error.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
GENDIR="${GENDIR:-$HERE/../generated}"
CXX="${CXX:-g++}"
ONLY="*" ARCHS=() DEFS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --only) ONLY="$2"; shift 2 ;;
    --define) DEFS+=("-D$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) ARCHS+=("$1"); shift ;;
  esac
done
[ ${#ARCHS[@]} -gt 0 ] || ARCHS=(800 900 1000)
cd "$GENDIR" || exit 1
bad=0 n=0
for u in cuda/*.cu; do
  b="$(basename "$u" .cu)"
  # shellcheck disable=SC2053
  [[ "$b" == $ONLY ]] || continue
  for a in host "${ARCHS[@]}"; do
    def=("${DEFS[@]}")
    [ "$a" = host ] || def+=("-D__CUDA_ARCH__=$a")
    out="$("$CXX" -std=c++17 -fsyntax-only -x c++ -Wall -Wextra -Wno-unknown-pragmas "${def[@]}" \
      -I"$HERE/gxxstub" -Iinclude -I../devicesrc "$u" 2>&1)"
    rc=$?
    n=$((n + 1))
    if [ $rc -ne 0 ] || [ -n "$out" ]; then
      bad=$((bad + 1))
      echo "== $b ($a): $([ $rc -ne 0 ] && echo FAILED || echo warnings)"
      echo "$out" | head -40
    fi
  done
done
[ $n -gt 0 ] || { echo "gxxcheck: --only $ONLY matches no unit in $GENDIR/cuda" >&2; exit 1; }
echo "gxxcheck: $n compile(s), $bad with errors or warnings"
[ $bad -eq 0 ]
