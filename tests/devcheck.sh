#!/usr/bin/env bash
# devcheck.sh — compile-time check of the device library through the generated
# translation units: warnings (nvcc's front end, ptxas, nvcc driver) and the
# per-function resource usage that `-Xptxas -v` reports (registers, stack
# frame, spill stores/loads). No GPU needed.
#
# Usage: bash tests/devcheck.sh [options] [sm_XX ...]
#   sm_XX ...        target archs (default: sm_80 sm_90, plus sm_100 when
#                    `nvcc --list-gpu-arch` lists compute_100)
#   --only GLOB      compile only the units whose file name (without .cu)
#                    matches GLOB (shell pattern; repeatable, or comma-separated),
#                    e.g. --only 'all_reduce_sum_*' --only device_table
#   -j N             parallel nvcc jobs (default: nproc)
#   -q               no per-function tables (warnings and summary only)
#   --keep DIR       keep every nvcc log and cubin under DIR (default: temp dir, removed)
#   --nvcc PATH      nvcc to use (default as ncclgen build: $NVCC, $CUDA_HOME/bin/nvcc,
#                    nvcc on PATH, /usr/local/cuda/bin/nvcc)
#   -X FLAG          extra nvcc flag appended to the build's flags (repeatable)
# Environment: NVCC, CUDA_HOME (as above), GENDIR (default: <repo>/generated).
#
# Flags: exactly those of `ncclgen build` (gen/nvbuild: -cubin -rdc=true
# -arch=sm_XX, -std=c++17 unless the manifest sets it, --expt-relaxed-constexpr,
# -Wno-deprecated-gpu-targets, -I<manifest include_dirs>, <manifest nvcc_flags>),
# run from the manifest's directory, plus -Xptxas -v.
#
# Exit status: 0 when every compile succeeded without any warning; 1 on any
# warning; 2 on a compile failure or a usage error.
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
GENDIR="${GENDIR:-$ROOT/generated}"

# ---- internal: one compile (run by xargs) --------------------------------------------
if [ "${1:-}" = "--compile-one" ]; then
  # --compile-one WORKDIR NVCC FLAGS... ARCH UNIT   (xargs appends ARCH UNIT)
  W="$2" NV="$3"
  shift 3
  args=("$@")
  n=${#args[@]}
  A="${args[n-2]}" U="${args[n-1]}"
  b="$(basename "$U" .cu)"
  t=$(date +%s)
  "$NV" -cubin -rdc=true -arch="$A" "${args[@]:0:n-2}" -Xptxas -v -o "$W/$A/$b.cubin" "$U" >"$W/$A/$b.log" 2>&1
  echo "$? $(( $(date +%s) - t ))" >"$W/$A/$b.rc"
  exit 0
fi

usage() { sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

ARCHS=() ONLY=() EXTRA=() JOBS="" QUIET=0 KEEP="" NVCC_OPT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --only) [ $# -ge 2 ] || { usage >&2; exit 2; }; IFS=',' read -r -a _g <<<"$2"; ONLY+=("${_g[@]}"); shift 2 ;;
    --only=*) IFS=',' read -r -a _g <<<"${1#--only=}"; ONLY+=("${_g[@]}"); shift ;;
    -j) [ $# -ge 2 ] || { usage >&2; exit 2; }; JOBS="$2"; shift 2 ;;
    -j*) JOBS="${1#-j}"; shift ;;
    -q) QUIET=1; shift ;;
    --keep) [ $# -ge 2 ] || { usage >&2; exit 2; }; KEEP="$2"; shift 2 ;;
    --nvcc) [ $# -ge 2 ] || { usage >&2; exit 2; }; NVCC_OPT="$2"; shift 2 ;;
    -X) [ $# -ge 2 ] || { usage >&2; exit 2; }; EXTRA+=("$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    sm_*|compute_*) ARCHS+=("$1"); shift ;;
    *) echo "devcheck: unknown argument: $1" >&2; usage >&2; exit 2 ;;
  esac
done

# ---- toolchain -------------------------------------------------------------------------
find_nvcc() {
  if [ -n "$NVCC_OPT" ]; then echo "$NVCC_OPT"; return; fi
  if [ -n "${NVCC:-}" ]; then echo "$NVCC"; return; fi
  if [ -n "${CUDA_HOME:-}" ] && [ -x "$CUDA_HOME/bin/nvcc" ]; then echo "$CUDA_HOME/bin/nvcc"; return; fi
  if command -v nvcc >/dev/null 2>&1; then command -v nvcc; return; fi
  if [ -x /usr/local/cuda/bin/nvcc ]; then echo /usr/local/cuda/bin/nvcc; return; fi
  return 1
}
NV="$(find_nvcc)" || { echo "devcheck: nvcc not found (set NVCC or CUDA_HOME)" >&2; exit 2; }
"$NV" --version >/dev/null 2>&1 || { echo "devcheck: $NV does not run" >&2; exit 2; }
NVVER="$("$NV" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
GPUARCHS="$("$NV" --list-gpu-arch 2>/dev/null | tr '\n' ' ')"
if [ ${#ARCHS[@]} -eq 0 ]; then
  ARCHS=(sm_80 sm_90)
  case " $GPUARCHS " in *" compute_100 "*) ARCHS+=(sm_100) ;; esac
fi
for a in "${ARCHS[@]}"; do
  case " $GPUARCHS " in
    *" compute_${a#sm_} "*) ;;
    *) if [ -n "$GPUARCHS" ]; then echo "devcheck: nvcc $NVVER does not support $a (it lists: $GPUARCHS)" >&2; exit 2; fi ;;
  esac
done
# c++ demangler for ptxas's names
DEM=cat
for d in "$(dirname "$NV")/cu++filt" cu++filt c++filt; do
  if command -v "$d" >/dev/null 2>&1; then DEM="$d"; break; fi
done
[ -z "$JOBS" ] && JOBS="$(nproc 2>/dev/null || echo 4)"

# ---- the build's flags, from the manifest ------------------------------------------------
MAN="$GENDIR/manifest.json"
[ -f "$MAN" ] || { echo "devcheck: no $MAN (run go generate ./...)" >&2; exit 2; }
# Strings of a JSON array "key": [ ... ] in the (indented) manifest.
json_array() {
  awk -v key="\"$1\"" '
    index($0, key) && /\[/ { on = 1; sub(/.*\[/, "") }
    on { line = $0; end = index(line, "]"); if (end) line = substr(line, 1, end - 1)
         while (match(line, /"([^"\\]|\\.)*"/)) { print substr(line, RSTART + 1, RLENGTH - 2); line = substr(line, RSTART + RLENGTH) }
         if (end) exit }' "$MAN"
}
mapfile -t INCS < <(json_array include_dirs)
mapfile -t MFLAGS < <(json_array nvcc_flags)
mapfile -t UNITS < <(awk '/"file":/ { s = $0; sub(/.*"file": *"/, "", s); sub(/".*/, "", s); print s }' "$MAN")
[ ${#UNITS[@]} -gt 0 ] || { echo "devcheck: no units in $MAN" >&2; exit 2; }
has_flag() { local n="$1" f; shift; for f in "$@"; do case "$f" in "$n"|"$n="*) return 0 ;; esac; done; return 1; }
USER_FLAGS=("${MFLAGS[@]}" "${EXTRA[@]}")
FLAGS=()
has_flag -std "${USER_FLAGS[@]}" || has_flag --std "${USER_FLAGS[@]}" || FLAGS+=(-std=c++17)
has_flag --expt-relaxed-constexpr "${USER_FLAGS[@]}" || has_flag -expt-relaxed-constexpr "${USER_FLAGS[@]}" ||
  FLAGS+=(--expt-relaxed-constexpr)
FLAGS+=(-Wno-deprecated-gpu-targets)
for d in "${INCS[@]}"; do FLAGS+=("-I$d"); done
FLAGS+=("${USER_FLAGS[@]}")

# unit selection
SEL=()
for u in "${UNITS[@]}"; do
  b="$(basename "$u" .cu)"
  if [ ${#ONLY[@]} -gt 0 ]; then
    m=0
    for g in "${ONLY[@]}"; do
      # shellcheck disable=SC2053
      [[ "$b" == $g || "$u" == $g ]] && { m=1; break; }
    done
    [ $m = 1 ] || continue
  fi
  SEL+=("$u")
done
[ ${#SEL[@]} -gt 0 ] || { echo "devcheck: --only ${ONLY[*]} matches no unit" >&2; exit 2; }

if [ -n "$KEEP" ]; then
  W="$KEEP"; mkdir -p "$W"
else
  W="$(mktemp -d "${TMPDIR:-/tmp}/devcheck.XXXXXX")"
  trap 'rm -rf "$W"' EXIT
fi
for a in "${ARCHS[@]}"; do rm -rf "${W:?}/$a"; mkdir -p "$W/$a"; done

echo "devcheck: $NV (release $NVVER); archs: ${ARCHS[*]}; ${#SEL[@]} unit(s); $JOBS job(s)"
echo "  cd $GENDIR && $(basename "$NV") -cubin -rdc=true -arch=sm_XX ${FLAGS[*]} -Xptxas -v -o X.cubin <unit.cu>"
t0=$(date +%s)
# Largest units first: better packing of the parallel jobs.
(
  cd "$GENDIR" || exit 2
  for a in "${ARCHS[@]}"; do
    for u in "${SEL[@]}"; do printf '%s\t%s\t%s\n' "$(wc -c <"$u" 2>/dev/null || echo 0)" "$a" "$u"; done
  done | sort -t "$(printf '\t')" -k1,1nr | cut -f2,3 | tr '\t' '\n' |
    xargs -d '\n' -n 2 -P "$JOBS" bash "$HERE/devcheck.sh" --compile-one "$W" "$NV" "${FLAGS[@]}"
) >/dev/null
echo "compiled in $(( $(date +%s) - t0 )) s"

# ---- parse the logs ------------------------------------------------------------------------
# Records (tab-separated):
#   W arch unit message          one warning (first line of nvcc's/ptxas's message)
#   F arch unit func regs stack spillStores spillLoads kind   (regs "-" when ptxas prints none)
#   X arch unit rc seconds       compile status
REC="$W/records.tsv"
for a in "${ARCHS[@]}"; do
  for u in "${SEL[@]}"; do
    b="$(basename "$u" .cu)"
    log="$W/$a/$b.log"
    read -r rc secs <"$W/$a/$b.rc" 2>/dev/null || { rc=255; secs=0; }
    printf 'X\t%s\t%s\t%s\t%s\n' "$a" "$b" "$rc" "$secs"
    [ -f "$log" ] || continue
    awk -v A="$a" -v U="$b" '
      function flush() { if (fn != "") printf "F\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", A, U, fn, regs, stk, sst, sld, kind; fn = "" }
      # nvcc front end (EDG): "file(line): warning #177-D: ..."; cudafe/nvcc/ptxas/nvlink: "xxx warning : ..."
      /: [Ww]arning( #[0-9A-Za-z-]+)?:/ || /^(ptxas|nvcc|nvlink|cicc|cudafe\+\+|fatbinary) [Ww]arning *:/ ||
      /: warning: / { msg = $0; sub(/^[ \t]+/, "", msg); printf "W\t%s\t%s\t%s\n", A, U, msg; next }
      /ptxas info *: Compiling entry function/ { flush(); ent = $0; sub(/.*function \047/, "", ent); sub(/\047.*/, "", ent); next }
      /ptxas info *: Function properties for / {
        flush(); fn = $0; sub(/.*Function properties for /, "", fn); sub(/[ \t]+$/, "", fn)
        kind = (fn == ent) ? "kernel" : "func"; regs = "-"; stk = sst = sld = 0; next }
      /bytes stack frame/ && fn != "" {
        if (match($0, /[0-9]+ bytes stack frame/)) stk = substr($0, RSTART, RLENGTH) + 0
        if (match($0, /[0-9]+ bytes spill stores/)) sst = substr($0, RSTART, RLENGTH) + 0
        if (match($0, /[0-9]+ bytes spill loads/)) sld = substr($0, RSTART, RLENGTH) + 0
        next }
      /ptxas info *: Used [0-9]+ registers/ && fn != "" { match($0, /Used [0-9]+ registers/); regs = substr($0, RSTART + 5, RLENGTH - 15) + 0; next }
      END { flush() }' "$log"
  done
done | "$DEM" | sed 's/(ngShmem \{0,1\}\*)//' >"$REC"

NWARN=$(awk -F'\t' '$1 == "W"' "$REC" | wc -l)
NFAIL=$(awk -F'\t' '$1 == "X" && $4 != 0' "$REC" | wc -l)

# ---- per unit ---------------------------------------------------------------------------------
for a in "${ARCHS[@]}"; do
  for u in "${SEL[@]}"; do
    b="$(basename "$u" .cu)"
    awk -F'\t' -v A="$a" -v U="$b" -v Q="$QUIET" '
      $2 != A || $3 != U { next }
      $1 == "X" { rc = $4; secs = $5 }
      $1 == "W" { w[++nw] = $4 }
      $1 == "F" { f[++nf] = $0 }
      END {
        if (Q && nw == 0 && rc == 0) exit
        printf "== %s %s: %s, %d warning(s), %d s\n", A, U, rc == 0 ? "ok" : "FAILED (nvcc exit " rc ")", nw, secs
        for (i = 1; i <= nw; i++) printf "   warning: %s\n", w[i]
        if (Q || nf == 0) exit
        printf "   %-58s %5s %6s %8s %8s\n", "function", "regs", "stack", "spill-st", "spill-ld"
        for (i = 1; i <= nf; i++) { split(f[i], x, "\t"); printf "   %-58s %5s %6d %8d %8d%s\n", x[4] (x[9] == "kernel" ? " [kernel]" : ""), x[5], x[6], x[7], x[8], (x[7] + x[8] > 0) ? "  SPILL" : "" }
      }' "$REC"
    if [ "$(awk -F'\t' -v A="$a" -v U="$b" '$1 == "X" && $2 == A && $3 == U {print $4}' "$REC")" != 0 ]; then
      echo "   --- nvcc output ---"; sed 's/^/   /' "$W/$a/$b.log" | head -40
    fi
  done
done

# ---- summary ----------------------------------------------------------------------------------
echo
echo "==== summary: nvcc $NVVER, ${ARCHS[*]}, ${#SEL[@]} unit(s)"
echo "compile failures: $NFAIL"
echo "warnings: $NWARN total, $(awk -F'\t' '$1 == "W" {print $4}' "$REC" | sort -u | wc -l) distinct"
awk -F'\t' '$1 == "W" {print $4}' "$REC" | sort | uniq -c | sort -rn | head -50 | sed 's/^/  /'
echo "functions with spills (arch, spill stores/loads bytes, stack frame, regs, function) — ptxas counts the"
echo "callee-saved registers a non-inlined device function saves as spill stores too:"
awk -F'\t' '$1 == "F" && $7 + $8 > 0 {printf "%s\t%s\t%s\t%s\t%s\t%s\n", $2, $4, $5, $6, $7, $8}' "$REC" | sort -u |
  sort -t "$(printf '\t')" -k5,5nr -k1,1 -k2,2 |
  awk -F'\t' '{ n++; if (n <= 40) printf "  %-6s %5d/%-5d stack %5d regs %3s  %s\n", $1, $5, $6, $4, $3, $2 } END { printf "  (%d function(s) with spills%s)\n", n, (n > 40 ? ", 40 largest shown" : "") }'
echo "key functions:"
awk -F'\t' '$1 == "F" && ($4 ~ /^ngDevFunc_AllReduce_.*_RING_SIMPLE$/ || $4 == "ngDevKernel_AllReduce_Sum_f32_RING_LL") {
    printf "%s\t%s\t%s\t%s\t%s\t%s\n", $2, $4, $5, $6, $7, $8 }' "$REC" | sort -u | sort -t "$(printf '\t')" -k2,2 -k1,1 |
  awk -F'\t' 'BEGIN { printf "  %-6s %-48s %5s %6s %8s %8s\n", "arch", "function", "regs", "stack", "spill-st", "spill-ld" }
    { n++; printf "  %-6s %-48s %5s %6d %8d %8d\n", $1, $2, $3, $4, $5, $6 } END { if (!n) print "  (none of them in the selected units)" }'

if [ "$NFAIL" -gt 0 ]; then echo "FAIL: $NFAIL compile(s) failed"; exit 2; fi
if [ "$NWARN" -gt 0 ]; then echo "FAIL: $NWARN warning(s)"; exit 1; fi
echo "OK: no warnings"
exit 0
