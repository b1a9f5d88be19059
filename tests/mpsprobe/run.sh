#!/usr/bin/env bash
# run.sh [OUTDIR]: builds kill.cu with nvcc and, under MPS on GPU 0, SIGKILLs
# a victim process (a spinning kernel, short kernels, a kernel spinning on
# a shared-memory flag that is set once the victim is dead) while a survivor
# runs short kernels; prints one line per case: whether the survivor saw an
# error, and the MPS server's fatal-error lines. See kill.cu.
set -uo pipefail
cd "$(dirname "$0")"
out=${1:-/tmp/mpsprobe}
mkdir -p "$out"
nvcc -O2 -arch=sm_90 -o "$out/kill" kill.cu || exit 1
export CUDA_MPS_PIPE_DIRECTORY=$out/mps/pipe CUDA_MPS_LOG_DIRECTORY=$out/mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d || exit 1
trap 'echo quit | nvidia-cuda-mps-control' EXIT
for victim in spin tick spinshm; do
  "$out/kill" tick 4 > "$out/survivor-$victim.log" 2>&1 &
  s=$!
  if [[ $victim == spinshm ]]; then
    rm -f /dev/shm/mpsprobe-flag
    "$out/kill" spinshm /dev/shm/mpsprobe-flag 30 > "$out/victim-$victim.log" 2>&1 &
  else
    "$out/kill" "$victim" 30 > "$out/victim-$victim.log" 2>&1 &
  fi
  v=$!
  sleep 1.5
  kill -9 $v
  # spinshm: end the orphan kernel from outside, as a survivor would.
  [[ $victim == spinshm ]] && printf '\001\000\000\000' | dd of=/dev/shm/mpsprobe-flag conv=notrunc status=none
  wait $v 2>/dev/null
  wait $s; rc=$?
  echo "victim=$victim killed; survivor rc=$rc: $(tail -1 "$out/survivor-$victim.log"); MPS fatal-error lines so far: $(cat "$CUDA_MPS_LOG_DIRECTORY"/server.log 2>/dev/null | grep -c 'fatal GPU error')"
  sleep 1
done
grep -hE 'fatal|reset|torn down' "$CUDA_MPS_LOG_DIRECTORY"/server.log | head -8
