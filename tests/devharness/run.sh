#!/usr/bin/env bash
# Builds the device harness from the slim generated tree in gen/ (made with
#   go generate ./tests/devharness, see doc.go)
# plus devicesrc/, then runs it. Usage: bash tests/devharness/run.sh [harness args]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
ARCH="${ARCH:-sm_90}"
B="${BUILD_DIR:-/tmp/ngdevharness}"
mkdir -p "$B"
NVCC="${NVCC:-nvcc}"
FLAGS=(-rdc=true -dc -std=c++17 -O3 -maxrregcount=96 -arch="$ARCH" -I "$HERE/gen/include" -I "$ROOT/devicesrc" ${EXTRA_FLAGS:-})
$NVCC --version | tail -1
t0=$(date +%s)
ls "$HERE"/gen/cuda/*.cu | xargs -P "$(nproc)" -I{} sh -c \
  "$NVCC ${FLAGS[*]} {} -o $B/\$(basename {} .cu).o || { echo 'nvcc failed: {}'; exit 255; }"
$NVCC "${FLAGS[@]}" "$HERE/harness.cu" -o "$B/harness.o"
$NVCC -arch="$ARCH" -rdc=true -maxrregcount=96 "$B"/*.o -o "$B/harness"
echo "build: $(( $(date +%s) - t0 )) s"
[ "${BUILD_ONLY:-0}" = 1 ] && exit 0
"$B/harness" "$HERE/gen/cuda/device_table.cu" "$@"
