#!/usr/bin/env bash
# netsweep.sh: issue 24's NET knobs on one GPU, two fake hosts under MPS.
#
# Run from the repository root on the GPU machine, with the bundle built
# (bundle/bin/ncclperf); needs bash, awk, timeout and the bundle only.
# Runs `ncclperf -np 2 -hosts 2` AllReduce over TCP loopback
# (NCCL_SOCKET_IFNAME=lo) for a grid of settings, 16 MiB and 128 MiB
# (-n 20, -c 1), then the 8 B latency (-n 5000) for the default and the
# proxy's spin settings, and prints one table: the settings, the busbw
# (GB/s, out of place) or the time (µs), the #wrong of both placements,
# the exit status and the run's seconds. Every run is under `timeout`;
# runs that would pass the budget (BUDGET seconds, default 235) are
# skipped and say so.
#
# Variables: BUDGET (s), OUT (the runs' logs, default /tmp/netsweep),
# NCCLPERF (default bundle/bin/ncclperf), MPS=0 to run without MPS.
#
# The settings (docs/ARCHITECTURE.md, NET and the proxy):
#   NCCL_BUFFSIZE           SIMPLE buffer per connection; a NET step is 1/8
#   NCCL_SOCKET_NTHREADS    data socket helper threads (loopback default 4)
#   NCCL_NCHANNELS          channels
#   NCCLGO_SOCKET_CHUNK     smallest piece of a message per data socket
#   NCCLGO_SOCKET_INLINE    largest message on the control socket (no helper)
#   NCCLGO_SOCKET_SPLICE    vmsplice/splice the sender's chunks
#   NCCLGO_NET_RECV_AHEAD   payloads the receiving proxy keeps posted
#   NCCLGO_NET_SEND_PAIRS   header+payload pairs the sending proxy keeps posted
#   NCCLGO_NET_CREDIT_BATCH consumed steps per credit
#   NCCLGO_NET_PROXY_SPIN_US / _NAP_US  the proxy's spin after work, its naps
set -uo pipefail

BUDGET=${BUDGET:-235}
OUT=${OUT:-/tmp/netsweep}
NCCLPERF=${NCCLPERF:-bundle/bin/ncclperf}
MPS=${MPS:-1}
BW_TIMEOUT=${BW_TIMEOUT:-30}
LAT_TIMEOUT=${LAT_TIMEOUT:-20}

if [[ ! -x $NCCLPERF ]]; then
  echo "netsweep: $NCCLPERF is not an executable (run from the repository root with the bundle built)" >&2
  exit 2
fi
mkdir -p "$OUT"
start=$SECONDS

# The grid: a label, then the variables (none: the defaults).
BW_RUNS=(
  "default|"
  "buff8M|NCCL_BUFFSIZE=8388608"
  "buff16M|NCCL_BUFFSIZE=16777216"
  "chunk512K|NCCLGO_SOCKET_CHUNK=524288"
  "buff16M+chunk2M|NCCL_BUFFSIZE=16777216 NCCLGO_SOCKET_CHUNK=2097152"
  "ahead16|NCCLGO_NET_RECV_AHEAD=16"
  "ahead16+batch1|NCCLGO_NET_RECV_AHEAD=16 NCCLGO_NET_CREDIT_BATCH=1"
  "thr8+chunk512K|NCCL_SOCKET_NTHREADS=8 NCCLGO_SOCKET_CHUNK=524288"
  "thr2|NCCL_SOCKET_NTHREADS=2"
  "ch8+buff16M|NCCL_NCHANNELS=8 NCCL_BUFFSIZE=16777216"
  "splice+chunk512K|NCCLGO_SOCKET_SPLICE=1 NCCLGO_SOCKET_CHUNK=524288"
  "all|NCCL_BUFFSIZE=16777216 NCCLGO_SOCKET_CHUNK=2097152 NCCLGO_NET_RECV_AHEAD=16 NCCL_SOCKET_NTHREADS=8"
)
LAT_RUNS=(
  "default|"
  "spin0|NCCLGO_NET_PROXY_SPIN_US=0"
  "spin2ms+nap5|NCCLGO_NET_PROXY_SPIN_US=2000 NCCLGO_NET_PROXY_NAP_US=5"
)

MPS_DIR=$OUT/mps
mps_env() { env CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log" "$@"; }
MPS_ON=0
mps_stop() {
  ((MPS_ON)) || return 0
  echo quit | mps_env timeout 20 nvidia-cuda-mps-control >/dev/null 2>&1
  local i; for i in $(seq 1 20); do [[ -e $MPS_DIR/pipe/control ]] || break; sleep 0.5; done
  MPS_ON=0
}
trap mps_stop EXIT
trap 'mps_stop; exit 130' INT TERM
note=""
if ((MPS)); then
  mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
  if command -v nvidia-cuda-mps-control >/dev/null && mps_env nvidia-cuda-mps-control -d; then
    MPS_ON=1; sleep 1
    export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
  else
    note="# MPS did not start: the runs share the GPU without it"
  fi
fi

# run KIND LABEL VARS: one ncclperf run; prints its table row.
run() {
  local kind=$1 label=$2 vars=$3 t args log rc took row
  if [[ $kind == bw ]]; then
    t=$BW_TIMEOUT args=(-b 16M -e 128M -f 8 -c 1 -n 20)
  else
    t=$LAT_TIMEOUT args=(-b 8 -e 8 -n 5000 -c 1)
  fi
  if ((SECONDS - start + t > BUDGET)); then
    printf '%-5s %-18s %-88s %s\n' "$kind" "$label" "${vars:--}" "skipped (budget ${BUDGET}s)"
    return
  fi
  log=$OUT/$kind-$label.log
  local t0=$SECONDS
  # shellcheck disable=SC2086 # vars is a list of NAME=value words
  timeout -k 5 "$t" env NCCL_SOCKET_IFNAME=lo $vars "$NCCLPERF" -np 2 -hosts 2 "${args[@]}" >"$log" 2>&1
  rc=$? took=$((SECONDS - t0))
  if [[ $kind == bw ]]; then
    # Rows: size count type redop root, then time algbw busbw #wrong out of
    # place ($6-$9) and in place ($10-$13).
    row=$(awk '$1 == 16777216 && NF >= 13 {a = $8; w += $9 + $13}
               $1 == 134217728 && NF >= 13 {b = $8; w += $9 + $13}
               END {printf "%9s %9s %6s", a == "" ? "-" : a, b == "" ? "-" : b, w + 0}' "$log")
  else
    row=$(awk '$1 == 8 && NF >= 13 {a = $6; w += $9 + $13}
               END {printf "%9s %9s %6s", a == "" ? "-" : a, "", w + 0}' "$log")
  fi
  printf '%-5s %-18s %-88s %s %4s %4s\n' "$kind" "$label" "${vars:--}" "$row" "$rc" "$took"
}

echo "# netsweep $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) cores; logs in $OUT"
[[ -n $note ]] && echo "$note"
printf '%-5s %-18s %-88s %9s %9s %6s %4s %4s\n' "#kind" "label" "settings (NCCL_SOCKET_IFNAME=lo besides)" "16M/8B" "128M" "wrong" "rc" "s"
printf '%-5s %-18s %-88s %9s %9s %6s %4s %4s\n' "#" "" "" "GB/s|us" "GB/s" "" "" ""
# The latency runs first: they are short, and a tight BUDGET cuts the
# bandwidth grid's tail rather than them.
for r in "${LAT_RUNS[@]}"; do run lat "${r%%|*}" "${r#*|}"; done
for r in "${BW_RUNS[@]}"; do run bw "${r%%|*}" "${r#*|}"; done
echo "# total $((SECONDS - start)) s"
