#!/usr/bin/env bash
# bisect.sh: where does ncclperf's NCCL column lose (or gain) time against
# nccl-tests at small sizes? Runs one set of harness variants on the same
# NCCL, interleaved over rounds, and prints per collective and size the
# median out-of-place time of each variant and its ratio to nccl-tests'.
#
# Variants (BISECT_VARIANTS picks and orders them):
#   nt        nccl-tests' *_perf (NCCL linked at build time)
#   loop      tests/calib/ncclloop (C; NCCL and the CUDA runtime by dlopen)
#   looppre   ncclloop with LD_PRELOAD=NCCL (loaded at start, as if linked)
#   np        ncclperf -ncclgo=false -compare NCCL -ref-loop=go (one cgo call
#             per iteration; NCCL by dlopen)
#   nppre     np with LD_PRELOAD=NCCL
#   npgo1     np with GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1
#   npcloop   ncclperf's column as it runs by default: -ref-loop=c (the timed
#             loop in one cgo call)
#   npfull    ncclperf -compare NCCL after ncclgo's own sweep (the column as
#             -compare prints it; needs NCCLGO_FATBIN)
#
# Inputs (environment): NT (nccl-tests' build dir), LOOP (ncclloop), NP
# (ncclperf), NCCL_LIB, CUDART, OUTDIR; BISECT_COLLS (allreduce broadcast),
# BISECT_ARGS (-b 8 -e 1M -f 2 -g 1 -n 1000 -w 20 -c 0), BISECT_ROUNDS (3),
# BISECT_PIN (a taskset CPU list, or empty), BISECT_TO (60 s a run).
set -uo pipefail
: "${NT:?}" "${LOOP:?}" "${NP:?}" "${NCCL_LIB:?}" "${CUDART:?}" "${OUTDIR:?}"
VARIANTS=${BISECT_VARIANTS:-nt loop looppre np nppre npgo1 npcloop}
COLLS=${BISECT_COLLS:-allreduce broadcast}
ARGS=${BISECT_ARGS:--b 8 -e 1M -f 2 -g 1 -n 1000 -w 20 -c 0}
ROUNDS=${BISECT_ROUNDS:-3}
PIN=${BISECT_PIN:+taskset -c $BISECT_PIN}
TO=${BISECT_TO:-60}
mkdir -p "$OUTDIR"
lib=$(readlink -f "$NCCL_LIB")
# ncclloop takes -b -e -g -n -w (no -f, -c: it goes by 2 and never checks).
loopargs=$(echo "$ARGS" | sed -E 's/-f [^ ]+//; s/-c [^ ]+//')

runone() { # variant coll file
  local v=$1 coll=$2 f=$3 nt
  case $coll in allreduce) nt=all_reduce;; allgather) nt=all_gather;; reducescatter) nt=reduce_scatter;; broadcast) nt=broadcast;; esac
  # shellcheck disable=SC2086
  case $v in
    nt) timeout "$TO" $PIN "$NT/${nt}_perf" $ARGS ;;
    loop) timeout "$TO" $PIN "$LOOP" -l "$lib" -r "$CUDART" -c "$coll" $loopargs ;;
    looppre) LD_PRELOAD=$lib timeout "$TO" $PIN "$LOOP" -l "$lib" -r "$CUDART" -c "$coll" $loopargs ;;
    np) timeout "$TO" $PIN "$NP" -coll "$coll" $ARGS -compare "$lib" -ncclgo=false -ref-loop=go ;;
    nppre) LD_PRELOAD=$lib timeout "$TO" $PIN "$NP" -coll "$coll" $ARGS -compare "$lib" -ncclgo=false -ref-loop=go ;;
    npgo1) GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 timeout "$TO" $PIN "$NP" -coll "$coll" $ARGS -compare "$lib" -ncclgo=false -ref-loop=go ;;
    npcloop) timeout "$TO" $PIN "$NP" -coll "$coll" $ARGS -compare "$lib" -ncclgo=false -ref-loop=c ;;
    npfull) timeout "$TO" $PIN "$NP" -coll "$coll" $ARGS -compare "$lib" ${NCCLGO_FATBIN:+-fatbin "$NCCLGO_FATBIN"} ;;
    *) echo "bisect: unknown variant $v"; return 2 ;;
  esac > "$f" 2>&1
}

for coll in $COLLS; do
  for r in $(seq 1 "$ROUNDS"); do
    # rotate the order each round, so no variant always runs first
    set -- $VARIANTS
    for ((k = 0; k < (r - 1) % $#; k++)); do set -- "${@:2}" "$1"; done
    for v in "$@"; do
      runone "$v" "$coll" "$OUTDIR/$coll-$v-$r.txt" || { echo "bisect: $coll $v round $r: rc=$?"; tail -3 "$OUTDIR/$coll-$v-$r.txt"; }
    done
  done
  # the time column: 6 in nccl-tests, ncclloop and ncclperf alone; with ncclgo's
  # sweep first (npfull) NCCL's is column 14
  awk -v coll="$coll" -v variants="$VARIANTS" '
    function med(s,   n, a, i, j, v) {
      n = split(s, a, " "); if (n == 0) return -1
      for (i = 2; i <= n; i++) { v = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    FNR == 1 { f = FILENAME; sub(/.*\//, "", f); split(f, p, "-"); v = p[2] }
    $1 ~ /^[0-9]+$/ && NF >= 6 && $6 ~ /^[0-9.]+$/ {
      t = (v == "npfull" && NF >= 16) ? $14 : $6
      tm[$1 + 0, v] = tm[$1 + 0, v] " " t; if (!($1 + 0 in seen)) { seen[$1 + 0] = 1; sizes[++ns] = $1 + 0 }
    }
    END {
      nv = split(variants, vs, " ")
      printf "# bisect %s: median out-of-place us over rounds; (x) = variant / nt\n#%11s", coll, "size"
      for (i = 1; i <= nv; i++) printf " %16s", vs[i]; printf "\n"
      for (k = 1; k <= ns; k++) {
        s = sizes[k]; base = med(tm[s, "nt"]); printf "%12d", s
        for (i = 1; i <= nv; i++) { m = med(tm[s, vs[i]]); if (m < 0) printf " %16s", "-"; else if (base > 0) printf " %8.2f (%5.3f)", m, m / base; else printf " %16.2f", m }
        printf "\n"
      }
    }' $(ls "$OUTDIR/$coll"-*-*.txt | sort)
done

# BISECT_TRACE=1: what each process asks of the kernel while it loops (8 B to
# 64 B, -n 5000): strace -f -c per variant, and perf stat when there is one.
if [[ ${BISECT_TRACE:-0} == 1 ]]; then
  ARGS="-b 8 -e 64 -f 2 -g 1 -n 5000 -w 20 -c 0" loopargs="-b 8 -e 64 -g 1 -n 5000 -w 20"
  for v in $VARIANTS; do
    [[ $v == npfull ]] && continue
    if command -v strace > /dev/null; then
      PIN="strace -f -c -o $OUTDIR/strace-$v.txt" runone "$v" allreduce "$OUTDIR/trace-$v.txt"
      echo "# strace -f -c, $v (allreduce 8-64 B, -n 5000 per size): top calls"
      sort -k4 -nr "$OUTDIR/strace-$v.txt" 2>/dev/null | grep -vE 'total|^-' | head -6 | sed 's/^/#   /'
    fi
    if command -v perf > /dev/null; then
      PIN="perf stat -e task-clock,context-switches,cpu-migrations,page-faults -o $OUTDIR/perf-$v.txt" runone "$v" allreduce "$OUTDIR/ptrace-$v.txt"
      echo "# perf stat, $v:"; grep -E 'task-clock|context|migrations|faults' "$OUTDIR/perf-$v.txt" | sed 's/^/#   /'
    fi
  done
  command -v strace > /dev/null || echo "# no strace here"
fi
