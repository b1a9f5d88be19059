#!/usr/bin/env bash
# Builds and runs flaglat (flaglat.cu: a flag's visibility between two SMs,
# by load/store flavour and SM pair). Usage:
#   bash tests/flaglat/run.sh [iterations] [A:B ...]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
B="${BUILD_DIR:-/tmp/flaglat}"
mkdir -p "$B"
"${NVCC:-nvcc}" -std=c++17 -O3 -arch="${ARCH:-sm_90}" "$HERE/flaglat.cu" -o "$B/flaglat"
"$B/flaglat" "$@"
