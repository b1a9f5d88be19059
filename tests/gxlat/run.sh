#!/usr/bin/env bash
# Builds and runs gxlat (gxlat.cu: the floor of a captured loop of two
# ranks' exchanges on one GPU, by graph shape). Usage:
#   bash tests/gxlat/run.sh [steps per graph] [replays]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
B="${BUILD_DIR:-/tmp/gxlat}"
mkdir -p "$B"
"${NVCC:-nvcc}" -std=c++17 -O3 -arch="${ARCH:-sm_90}" "$HERE/gxlat.cu" -o "$B/gxlat" -lcuda
"$B/gxlat" "$@"
