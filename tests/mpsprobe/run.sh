#!/usr/bin/env bash
# run.sh [OUTDIR] [CASES]: builds kill.cu with nvcc and, under MPS on GPU 0,
# SIGKILLs a victim process while a survivor runs short kernels; prints one
# line per case: whether the survivor saw an error, and the MPS server's
# fatal-error lines. Each case gets a fresh MPS server. CASES (default
# "spin tick spinshm:now spinshm:reaped spinshm:0.1 spinshm:0.5"):
#   spin             the victim's kernel spins on a flag in its own
#                    cudaHostAlloc memory that nobody sets
#   tick             the victim runs short kernels
#   spinshm:WHEN     the victim's kernel spins on a flag in shared memory
#                    (registered with cudaHostRegister) that this script
#                    sets from outside, as a surviving peer would: "now"
#                    right after the kill, "reaped" once the victim is
#                    reaped (every descriptor of it closed: when a peer's
#                    socket or pidfd can tell), or after WHEN seconds
# See kill.cu.
set -uo pipefail
cd "$(dirname "$0")"
out=${1:-/tmp/mpsprobe}
cases=${2:-spin tick spinshm:now spinshm:reaped spinshm:0.1 spinshm:0.5}
mkdir -p "$out"
nvcc -O2 -arch=sm_90 -o "$out/kill" kill.cu || exit 1
export CUDA_MPS_PIPE_DIRECTORY=$out/mps/pipe CUDA_MPS_LOG_DIRECTORY=$out/mps/log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
trap 'echo quit | nvidia-cuda-mps-control 2>/dev/null' EXIT
for c in $cases; do
  victim=${c%%:*} when=${c#*:}
  log=$out/mps-$c.log
  nvidia-cuda-mps-control -d || exit 1
  "$out/kill" tick 4 > "$out/survivor-$c.log" 2>&1 &
  s=$!
  if [[ $victim == spinshm ]]; then
    rm -f /dev/shm/mpsprobe-flag
    "$out/kill" spinshm /dev/shm/mpsprobe-flag 30 > "$out/victim-$c.log" 2>&1 &
  else
    "$out/kill" "$victim" 30 > "$out/victim-$c.log" 2>&1 &
  fi
  v=$!
  sleep 1.5
  t0=$(date +%s.%N)
  kill -9 $v
  if [[ $victim == spinshm ]]; then
    # End the orphan kernel from outside, as a surviving peer would.
    case $when in
    now) ;;
    reaped) wait $v 2>/dev/null ;;
    *) sleep "$when" ;;
    esac
    printf '\001\000\000\000' | dd of=/dev/shm/mpsprobe-flag conv=notrunc status=none
    set_at=$(awk "BEGIN { printf \"%.3f\", $(date +%s.%N) - $t0 }")
  fi
  wait $v 2>/dev/null
  wait $s; rc=$?
  echo "case=$c${set_at:+ (flag set ${set_at} s after the kill)}: survivor rc=$rc: $(tail -1 "$out/survivor-$c.log"); MPS fatal-error lines: $(grep -c 'fatal GPU error' "$CUDA_MPS_LOG_DIRECTORY"/server.log 2>/dev/null)"
  unset set_at
  echo quit | nvidia-cuda-mps-control; sleep 1
  cp "$CUDA_MPS_LOG_DIRECTORY"/server.log "$log" 2>/dev/null; rm -f "$CUDA_MPS_LOG_DIRECTORY"/*.log
done
grep -hE 'fatal|reset|torn down' "$out"/mps-*.log | sort | uniq -c | head -8
