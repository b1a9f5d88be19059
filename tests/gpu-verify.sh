#!/usr/bin/env bash
# The GPU machine's verification run, from a bundle built by `make bundle`
# (that machine has nvcc but no Go): build the full kernel set and time it
# (full, no-op, one changed unit), run the GPU tests, then the benchmarks
# against the machine's NCCL. Logs go to $OUT (or build/verify).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/verify}
mkdir -p "$OUT" build
export NCCL_NVLS_ENABLE=0
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
JOBS=${JOBS:-$(nproc)}
STEPS=${STEPS:-build perf tests}
B=bundle/bin
ROOT=$PWD
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "elapsed $(( ($(date +%s%N) - s) / 1000000 )) ms (rc=$rc): $*"; return $rc; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$NVCC --version | tail -2

if [[ " $STEPS " == *" build "* ]]; then
  echo "== full build (sm_90, -j $JOBS)"
  t $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache --out build/ncclgo.fatbin 2>&1 | tail -4
  echo "== no-op rebuild"
  t $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache --out build/ncclgo.fatbin 2>&1 | tail -2
  echo "== one changed translation unit"
  echo "// changed" >> generated/cuda/all_reduce_sum_f32.cu
  t $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache --out build/ncclgo.fatbin 2>&1 | tail -2
  sed -i '$d' generated/cuda/all_reduce_sum_f32.cu
  cuobjdump -lelf -lptx build/ncclgo.fatbin | head -5
  echo "kernels in the image: $(cuobjdump -elf build/ncclgo.fatbin 2>/dev/null | grep -c 'STT_FUNC.*ngDevKernel_' )"
fi
export NCCLGO_FATBIN=$PWD/build/ncclgo.fatbin

if [[ " $STEPS " == *" perf "* ]]; then
  NCCL_LIB=${NCCL_LIB:-$(find /opt /usr -name 'libnccl.so.2*' 2>/dev/null | head -1)}
  CMP=${NCCL_LIB:+-compare $NCCL_LIB}
  echo "== ncclperf (reference: ${NCCL_LIB:-none})"
  t $B/ncclperf -coll allreduce -b 8 -e 8 -g 2 -n 200 -w 20 $CMP
  t $B/ncclperf -coll allreduce -b 512M -e 512M -g 2 -n 10 -w 3 $CMP
  t $B/ncclperf -coll allreduce -b 8 -e 8 -g 8 -n 50 -w 5
fi

if [[ " $STEPS " == *" tests "* ]]; then
  for bin in bundle/tests/*.test; do
    name=$(basename "$bin" .test); dir=${name//_//}
    echo "== $name"
    (cd "$dir" && t "$ROOT/$bin" -test.count=1 -test.timeout=8m ${TESTFLAGS:-} > "$OUT/$name.log" 2>&1)
    grep -E '^(--- FAIL|FAIL|ok|PASS|panic)|elapsed' "$OUT/$name.log" | tail -${TAIL:-25}
  done
fi
