#!/usr/bin/env bash
# ab.sh: an interleaved side-by-side comparison of ncclperf builds or
# settings on the GPU machine, for figures that move from run to run
# (a lease's host timings spread by tens of percent): every round runs
# each variant once, in turn, and the table gives per variant and size
# the median, minimum and maximum of the out-of-place time over the
# rounds, the median's ratio to the first variant's, and the #wrong
# summed over rounds and placements.
#
#   VARIANTS  one variant per line: LABEL|NCCLPERF|VAR=VALUE ... (the
#             variables are optional), e.g.
#               VARIANTS=$'old|bundleold/bin/ncclperf\nnew|bundle/bin/ncclperf'
#               VARIANTS=$'pdl0|bundle/bin/ncclperf|NCCLGO_PDL=0\npdl1|bundle/bin/ncclperf|NCCLGO_PDL=1'
#   ARGS      ncclperf's arguments (default: -g 2 -b 8 -e 8 -n 20000 -w 1000 -c 0)
#   ROUNDS    rounds (default 5)
#   CPUS      taskset's CPU list for every run (default: none)
#   TIMEOUT   seconds per run (default 60); a run past it counts as failed
#   OUT       the runs' logs (default /tmp/ab)
#
# Run from the repository root, with NCCLGO_FATBIN (or build/ncclgo.fatbin)
# for the builds' kernels. Exit status: 1 when a run failed or any #wrong
# is not 0.
set -uo pipefail

VARIANTS=${VARIANTS:?"set VARIANTS: one LABEL|NCCLPERF|VAR=VALUE ... per line"}
ARGS=${ARGS:--g 2 -b 8 -e 8 -n 20000 -w 1000 -c 0}
ROUNDS=${ROUNDS:-5}
TIMEOUT=${TIMEOUT:-60}
OUT=${OUT:-/tmp/ab}
mkdir -p "$OUT"

labels=() bins=() envs=()
while IFS='|' read -r label bin env; do
  [[ -z $label ]] && continue
  if [[ ! -x $bin ]]; then
    echo "ab: variant $label: $bin is not an executable" >&2
    exit 2
  fi
  labels+=("$label") bins+=("$bin") envs+=("$env")
done <<< "$VARIANTS"
((${#labels[@]} >= 1)) || { echo "ab: no variants" >&2; exit 2; }

pin=()
[[ -n ${CPUS:-} ]] && pin=(taskset -c "$CPUS")
rows=$OUT/rows.txt
: > "$rows"
failed=0
for ((r = 1; r <= ROUNDS; r++)); do
  for i in "${!labels[@]}"; do
    log=$OUT/${labels[i]}-$r.log
    # shellcheck disable=SC2086 # ARGS and the variables split on purpose
    env ${envs[i]} timeout -k 2 "$TIMEOUT" "${pin[@]}" "${bins[i]}" $ARGS > "$log" 2>&1
    rc=$?
    if ((rc != 0)); then
      echo "ab: round $r, ${labels[i]}: exit status $rc (log $log)" >&2
      failed=1
      continue
    fi
    # size, out-of-place time, #wrong out of place and in place; under -G
    # a row is size count type time algbw busbw #wrong.
    awk -v l="${labels[i]}" '/^ +[0-9]+ / {
      if ($4 ~ /^[0-9.]+$/) print l, $1, $4, $7; else print l, $1, $6, $9 + $13 }' "$log" >> "$rows"
  done
done

printf '# ncclperf %s, %d rounds%s\n' "$ARGS" "$ROUNDS" "${CPUS:+, taskset -c $CPUS}"
printf '%-12s %12s %10s %10s %10s %8s %7s\n' variant size median min max ratio wrong
awk -v order="${labels[*]}" '
  { t[$1 " " $2] = t[$1 " " $2] " " $3; w[$1 " " $2] += $4; if (!($2 in seen)) { seen[$2] = 1; sizes[++ns] = $2 } }
  function median(s,   a, n, i, j, x) {
    n = split(s, a, " ")
    for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > x + 0; j--) a[j + 1] = a[j]; a[j + 1] = x }
    lo = a[1]; hi = a[n]
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    nv = split(order, v, " ")
    for (k = 1; k <= ns; k++) {
      base = ""
      for (i = 1; i <= nv; i++) {
        key = v[i] " " sizes[k]
        if (!(key in t)) { printf "%-12s %12s %10s\n", v[i], sizes[k], "(no run)"; continue }
        m = median(t[key])
        if (base == "") base = m
        printf "%-12s %12s %10.2f %10.2f %10.2f %8.3f %7d\n", v[i], sizes[k], m, lo, hi, (base > 0 ? m / base : 0), w[key]
        bad += w[key]
      }
    }
    exit bad > 0
  }' "$rows"
wrong=$?
((failed || wrong)) && exit 1
exit 0
