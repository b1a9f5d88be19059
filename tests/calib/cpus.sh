#!/usr/bin/env bash
# cpus.sh: is the small-size time of a harness a property of the CPU its
# thread runs on? Runs nccl-tests (nt) and ncclperf's NCCL column (np,
# -ncclgo=false) pinned to each CPU of CPUS in turn, PASSES times, and
# unpinned UNPINNED times each, and prints one line per run: the CPU, the
# harness, the pass and the median over sizes of the out-of-place time. A
# per-process mode that follows the CPU says: calibrate with both harnesses
# on the same CPU.
#
# Inputs (environment): NT (nccl-tests' build dir), NP (ncclperf), NCCL_LIB,
# OUTDIR; CPUS (default 0 2 4 6 8 10 12 14), PASSES (2), UNPINNED (4), COLL
# (allreduce), ARGS (-b 8 -e 64K -f 2 -g 1 -n 500 -w 20 -c 0 -N 2), TO (60).
set -uo pipefail
: "${NT:?}" "${NP:?}" "${NCCL_LIB:?}" "${OUTDIR:?}"
CPUS=${CPUS:-0 2 4 6 8 10 12 14}
PASSES=${PASSES:-2}
UNPINNED=${UNPINNED:-4}
COLL=${COLL:-allreduce}
ARGS=${ARGS:--b 8 -e 64K -f 2 -g 1 -n 500 -w 20 -c 0 -N 2}
TO=${TO:-60}
mkdir -p "$OUTDIR"
case $COLL in allreduce) nt=all_reduce;; allgather) nt=all_gather;; reducescatter) nt=reduce_scatter;; broadcast) nt=broadcast;; esac

# med prints the median of column 6 over a run's rows.
med() { awk '$1 ~ /^[0-9]+$/ && $1 > 0 && NF >= 13 { v[++n] = $6 + 0 }
  END { if (!n) { print "-"; exit } for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
        printf "%.2f\n", (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }' "$1"; }

one() { # cpu|- harness pass
  local pin=() f="$OUTDIR/$COLL-$2-cpu$1-$3.txt"
  [[ $1 != - ]] && pin=(taskset -c "$1")
  # shellcheck disable=SC2086
  if [[ $2 == nt ]]; then timeout "$TO" "${pin[@]}" "$NT/${nt}_perf" $ARGS > "$f" 2>&1
  else timeout "$TO" "${pin[@]}" "$NP" -coll "$COLL" $ARGS -compare "$NCCL_LIB" -ncclgo=false > "$f" 2>&1; fi
  printf "%-5s %-3s %d %s\n" "$1" "$2" "$3" "$(med "$f")"
}

echo "# cpus.sh $COLL $ARGS: cpu harness pass median-over-sizes(us)"
for p in $(seq 1 "$PASSES"); do
  for c in $CPUS; do
    if ((p % 2)); then one "$c" nt "$p"; one "$c" np "$p"; else one "$c" np "$p"; one "$c" nt "$p"; fi
  done
done
for p in $(seq 1 "$UNPINNED"); do one - nt "$p"; one - np "$p"; done
