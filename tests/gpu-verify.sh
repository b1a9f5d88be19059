#!/usr/bin/env bash
# The GPU machine's verification run, from a bundle built by `make bundle`
# (that machine has nvcc but no Go): build the full kernel set and time it
# (full, no-op, one changed unit), run the GPU tests, then the benchmarks
# against the machine's NCCL. Logs go to $OUT (or build/verify).
#
# STEPS (default "build perf tests") may also name "latency" (8 B
# diagnostics: enqueue time, CPU profiles in $OUT, protocols forced), and, for a machine of N GPUs
# (N from nvidia-smi, or NGPUS=...), with one rank per GPU in one process:
#   multigpu-tests  the correctness suite (tests.test -test.short, no 64 Mi cases)
#                   with NCCLGO_TEST_DEVICES=0,..,N-1 and NCCLGO_TEST_RANKS=${MG_RANKS:-N}
#                   (MG_RANKS=2,4,8 covers 2, 4 and 8 GPUs in one run: rank r on GPU r),
#                   then ncclgo.test's TestGPUSeveralGPUs; logs in $OUT/multigpu-*.log
#   multigpu-perf   ncclperf -compare against NCCL_LIB for allreduce, allgather,
#                   reducescatter and broadcast, 8 B to ${MG_MAX:-8G}, -f ${MG_F:-2},
#                   -g N; each table in $OUT/<coll>.txt, a verdict in $OUT/summary.txt
#   multigpu        both
# and "calibrate" (issue 17): nccl-tests, built here from the source tree in
# NCCL_TESTS_SRC (default third_party/nccl-tests, a copy of
# github.com/NVIDIA/nccl-tests; git-ignored) against NCCL_LIB's headers, and
# ncclperf's NCCL column on the same library, back to back in one lease:
# AllReduce, AllGather, ReduceScatter and Broadcast, ${CAL_B:-8} to
# ${CAL_E:-1G} by ${CAL_F:-2}, -g ${CAL_G:-2}, -n ${CAL_N:-200} -w ${CAL_W:-20}
# -c 0, ${CAL_ROUNDS:-3} rounds (nccl-tests first in odd rounds, ncclperf in
# even ones), both under `taskset -c $CAL_CPUS` when it is set (auto: GPU 0's
# local CPUs). $OUT/calibrate.txt has, per size (rows joined by size), the
# median out-of-place time of each, their ratio, whether they agree within
# 5 %, each one's spread over rounds and host time per iteration (and
# ncclgo's own column when a fatbin is present and CAL_NCCLGO is not 0);
# then, unless CAL_DIAG=0, the lines of NCCL_DEBUG=INFO (algorithm, protocol
# and channels per size; count, type, op, root per call; env and init) that
# differ between the two harnesses on a short sweep to ${CAL_DIAG_E:-4M}.
# Raw outputs, the nccl-tests build log and the machine's CPU and GPU
# topology: one tarball, $OUT/calibrate-raw.tgz. The step needs the GPUs
# only, not the fatbin: STEPS=calibrate is enough. On two H200s: nccl-tests'
# build (four binaries, sm_90) about 1-2 min, the runs about 2 min with
# CAL_NCCLGO=0 and 3 rounds, the diagnostics about 30 s.
# e.g. STEPS="build multigpu" OUT=... bash tests/gpu-verify.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/verify}
mkdir -p "$OUT" build
export NCCL_NVLS_ENABLE=0
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
JOBS=${JOBS:-$(nproc)}
STEPS=${STEPS:-build perf tests}
[[ " $STEPS " == *" multigpu "* ]] && STEPS="$STEPS multigpu-tests multigpu-perf"
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
  if (( $(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l) < 2 )) && [[ -z "${FORCE_COMPARE:-}" ]]; then
    # NCCL before 2.30 refuses ranks that share a GPU; FORCE_COMPARE=1 tries anyway.
    CMP=""
  fi
  echo "== ncclperf (reference: ${CMP:-none})"
  t $B/ncclperf -coll allreduce -b 8 -e 8 -g 2 -n 200 -w 20 $CMP
  t $B/ncclperf -coll allreduce -b 512M -e 512M -g 2 -n 10 -w 3 $CMP
  t $B/ncclperf -coll allreduce -b 8 -e 8 -g 8 -n 50 -w 5
  # Point-to-point (direct SIMPLE between ranks of one process), checked.
  t $B/ncclperf -coll sendrecv -b 8 -e 256M -f 8 -g 2 -n 20 -w 5
  t $B/ncclperf -coll alltoall -b 1K -e 256M -f 8 -g 4 -n 20 -w 5
fi

if [[ " $STEPS " == *" latency "* ]]; then
  # Small-message latency diagnostics: the enqueue loop's own time next to
  # the total, a CPU profile of 2 and 8 ranks, and each protocol forced.
  echo "== latency (8 B AllReduce)"
  $B/ncclperf -coll allreduce -b 8 -e 8 -g 2 -n 20000 -w 200 -hosttime -cpuprofile "$OUT/ar8-2ranks.prof" | grep -v '^# [a-zA-Z]'
  $B/ncclperf -coll allreduce -b 8 -e 8 -g 8 -n 5000 -w 100 -hosttime -cpuprofile "$OUT/ar8-8ranks.prof" | grep -v '^# [a-zA-Z]'
  $B/ncclperf -coll allreduce -b 8 -e 8 -g 1 -n 5000 -w 100 -hosttime | grep -v '^# [a-zA-Z]'
  for p in LL LL128 SIMPLE; do for ch in 1 2; do
    echo "-- NCCL_PROTO=$p NCCL_NCHANNELS=$ch"
    NCCL_PROTO=$p NCCL_NCHANNELS=$ch $B/ncclperf -coll allreduce -b 8 -e 8 -g 2 -n 5000 -w 100 -hosttime | grep -E '^ +[0-9]|host'
  done; done
  echo "-- 200 iterations (fewer than the launch queue holds: the enqueue time is the host's own)"
  for g in 2 8; do $B/ncclperf -coll allreduce -b 8 -e 8 -g $g -n 200 -w 200 -hosttime | grep -E '^ +[0-9]|host'; done
  NCCL_DEBUG=INFO $B/ncclperf -coll allreduce -b 8 -e 8 -g 2 -n 2 -w 0 2>&1 | grep -E 'AllReduce 8 bytes' | head -2
  echo "-- the driver's own launch cost"
  (cd runtime/cuda && "$ROOT/bundle/tests/runtime_cuda.test" -test.run XXX -test.bench GPULaunch -test.benchtime 20000x 2>&1 | grep -E 'Benchmark|FAIL')
fi

if [[ " $STEPS " == *" tests "* ]]; then
  for bin in bundle/tests/*.test; do
    name=$(basename "$bin" .test); dir=${name//_//}; [[ $name == ncclgo ]] && dir=.
    echo "== $name"
    (cd "$dir" && t "$ROOT/$bin" -test.count=1 -test.timeout=8m ${TESTFLAGS:-} > "$OUT/$name.log" 2>&1)
    grep -E '^(--- FAIL|FAIL|ok|PASS|panic)|elapsed' "$OUT/$name.log" | tail -${TAIL:-25}
  done
fi

NGPUS=${NGPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)}
DEVS=$(seq -s, 0 $((NGPUS - 1)))
NCCL_LIB=${NCCL_LIB:-}
for cand in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2 \
            $(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF}') \
            $(find /opt /usr -name 'libnccl.so.2*' 2>/dev/null); do
  [[ -z "$NCCL_LIB" && -e "$cand" ]] && NCCL_LIB=$cand
done

if [[ " $STEPS " == *" multigpu-tests "* ]]; then
  nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
  echo "== suite over $NGPUS GPUs (NCCLGO_TEST_DEVICES=$DEVS NCCLGO_TEST_RANKS=${MG_RANKS:-$NGPUS})"
  (cd tests && NCCLGO_TEST_DEVICES=$DEVS NCCLGO_TEST_RANKS=${MG_RANKS:-$NGPUS} NCCLGO_TEST_LARGE=${NCCLGO_TEST_LARGE:-0} \
    t timeout ${MG_TEST_TIMEOUT:-330} "$ROOT/bundle/tests/tests.test" -test.v -test.short -test.count=1 -test.timeout=${MG_TEST_TIMEOUT:-330}s ${TESTFLAGS:-} \
    > "$OUT/multigpu-tests.log" 2>&1)
  grep -E '^(--- FAIL|FAIL|ok|PASS|panic)|^    --- (PASS|FAIL)|checks|elapsed' "$OUT/multigpu-tests.log" | tail -${TAIL:-40}
  echo "== runtime TestGPUSeveralGPUs"
  (t timeout 120 "$ROOT/bundle/tests/ncclgo.test" -test.v -test.run 'TestGPUSeveralGPUs' -test.count=1 \
    > "$OUT/multigpu-runtime.log" 2>&1)
  grep -E -- '--- (PASS|FAIL|SKIP)|^(FAIL|ok|PASS|panic)|InitAll|elapsed' "$OUT/multigpu-runtime.log" | tail -${TAIL:-40}
fi

if [[ " $STEPS " == *" multigpu-perf "* ]]; then
  [[ -e "$OUT/topo.txt" ]] || nvidia-smi topo -m > "$OUT/topo.txt" 2>&1
  echo "== ncclperf over $NGPUS GPUs, reference ${NCCL_LIB:-none} (NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE)"
  : > "$OUT/summary.txt"
  for coll in allreduce allgather reducescatter broadcast; do
    cmd="$B/ncclperf -coll $coll -b 8 -e ${MG_MAX:-8G} -f ${MG_F:-2} -g $NGPUS -n ${MG_N:-50} -w ${MG_W:-10} ${NCCL_LIB:+-compare $NCCL_LIB}"
    echo "# command: NCCL_NVLS_ENABLE=0 NCCLGO_FATBIN=build/ncclgo.fatbin $cmd" > "$OUT/$coll.txt"
    t timeout ${MG_PERF_TIMEOUT:-120} $cmd >> "$OUT/$coll.txt" 2>&1 || tail -3 "$OUT/$coll.txt"
    grep -E '^# (ncclgo|reference):' "$OUT/$coll.txt" | head -2
    # Acceptance: the ratio (column NF-1; > 1: ncclgo better) is >= 1 at
    # every size (busbw from 64 KiB, time below).
    awk -v coll=$coll '$1 ~ /^[0-9]+$/ && NF > 14 { n++; if ($(NF-1) + 0 < 1) { bad++; worst = worst sprintf(" %s:%s", $1, $(NF-1)) } }
      END { printf "%-14s %d sizes, %d below NCCL%s\n", coll, n, bad, (bad ? ":" worst : "") }' "$OUT/$coll.txt" | tee -a "$OUT/summary.txt"
  done
fi

if [[ " $STEPS " == *" calibrate "* ]]; then
  SRC=${NCCL_TESTS_SRC:-third_party/nccl-tests}
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
  CAL_G=${CAL_G:-2}
  NH=$ROOT/build/nccl-home NT=$ROOT/build/nccl-tests
  # Raw outputs go to $CAL and leave as one tarball, $OUT/calibrate-raw.tgz.
  CAL=$ROOT/build/calibrate
  rm -rf "$CAL" && mkdir -p "$CAL"
  CAL_ARGS="-b ${CAL_B:-8} -e ${CAL_E:-1G} -f ${CAL_F:-2} -g $CAL_G -n ${CAL_N:-200} -w ${CAL_W:-20} -c 0"
  DIAG_ARGS="-b ${CAL_B:-8} -e ${CAL_DIAG_E:-4M} -f 2 -g $CAL_G -n 1 -w 1 -c 0"
  # CAL_CPUS pins both harnesses to the same CPUs (taskset -c LIST); auto: GPU 0's local CPUs.
  PIN="" cpus=${CAL_CPUS:-}
  if [[ "$cpus" == auto ]]; then
    bus=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader -i 0 2>/dev/null | tr 'A-F' 'a-f' | sed -E 's/^0000([0-9a-f]{4}:)/\1/')
    cpus=$(cat "/sys/bus/pci/devices/$bus/local_cpulist" 2>/dev/null)
    [[ -z "$cpus" ]] && echo "calibrate: CAL_CPUS=auto: no local_cpulist for GPU 0 (bus ${bus:-unknown}): not pinned"
  fi
  [[ -n "$cpus" ]] && PIN="taskset -c $cpus"
  echo "== calibrate: nccl-tests ($SRC) and ncclperf's NCCL column on ${NCCL_LIB:-no NCCL found}: $CAL_ARGS${PIN:+, both under $PIN}"
  if [[ -z "$NCCL_LIB" || ! -f "$SRC/src/common.cu" ]]; then
    echo "calibrate: skipped: needs NCCL_LIB (found: ${NCCL_LIB:-none}) and nccl-tests' source tree in NCCL_TESTS_SRC (no $SRC/src/common.cu)"
  else
    # nccl-tests' Makefile wants NCCL_HOME/include/nccl.h and NCCL_HOME/lib/libnccl.so:
    # stage them from NCCL_LIB and the nccl.h nearest to it.
    lib=$(readlink -f "$NCCL_LIB")
    inc=""
    for d in "$(dirname "$NCCL_LIB")/../include" "$(dirname "$lib")/../include" ${NCCL_HOME:+"$NCCL_HOME/include"} \
             /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/include /usr/include /usr/local/include "$CUDA_HOME/include" \
             $(find /opt /usr -name nccl.h 2>/dev/null | xargs -r -n1 dirname); do
      [[ -z "$inc" && -f "$d/nccl.h" ]] && inc=$(readlink -f "$d")
    done
    rm -rf "$NH" && mkdir -p "$NH/lib"
    ln -s "$inc" "$NH/include"
    ln -s "$lib" "$NH/lib/libnccl.so" && ln -s "$lib" "$NH/lib/libnccl.so.2"
    echo "nccl.h: $inc/nccl.h ($(grep -hE '^#define NCCL_(MAJOR|MINOR|PATCH) ' "$inc/nccl.h" 2>/dev/null | awk '{printf "%s%s", sep, $3; sep="."}')); library: $lib"
    targets=""
    for b in all_reduce all_gather reduce_scatter broadcast; do targets="$targets $NT/${b}_perf"; done
    t make -C "$SRC/src" -j "$JOBS" MPI=0 NCCL_HOME="$NH" CUDA_HOME="$CUDA_HOME" NVCC="$NVCC" \
      NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$NT" $targets > "$CAL/nccl-tests-build.log" 2>&1 \
      || tail -20 "$CAL/nccl-tests-build.log"
    tail -1 "$CAL/nccl-tests-build.log"
  fi
  if [[ -n "$NCCL_LIB" && -f "$SRC/src/common.cu" && ! -x "$NT/broadcast_perf" ]]; then
    echo "calibrate: skipped: nccl-tests did not build (log in $OUT/calibrate-raw.tgz)"
  elif [[ -n "$NCCL_LIB" && -f "$SRC/src/common.cu" ]]; then
    cal_start=$(date +%s)
    export LD_LIBRARY_PATH="$NH/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    { echo "# $CAL_ARGS${PIN:+ under $PIN}"; env | grep -E '^(NCCL|CUDA|GO)[A-Z_]*=' | sort; nproc; lscpu 2>/dev/null | head -25
      nvidia-smi topo -m 2>&1; nvidia-smi -q -d CLOCK,PERFORMANCE 2>&1 | head -60; } > "$CAL/machine.txt"
    # ncclperf runs ncclgo's sweep first when a fatbin is there (the column as -compare
    # normally measures it, after ncclgo's communicators are gone), else NCCL alone.
    GO=""
    [[ "${CAL_NCCLGO:-1}" == 0 || ! -f "$NCCLGO_FATBIN" ]] && GO="-ncclgo=false"
    : > "$OUT/calibrate.txt"
    echo "# calibrate: $CAL_ARGS, ${CAL_ROUNDS:-3} rounds (nccl-tests first in odd rounds, ncclperf first in even ones)${PIN:+, both under $PIN}; NCCL $lib" >> "$OUT/calibrate.txt"
    for coll in allreduce allgather reducescatter broadcast; do
      case $coll in allreduce) nt=all_reduce;; allgather) nt=all_gather;; reducescatter) nt=reduce_scatter;; broadcast) nt=broadcast;; esac
      for r in $(seq 1 "${CAL_ROUNDS:-3}"); do
        ntcmd=(timeout 120 $PIN "$NT/${nt}_perf" $CAL_ARGS)
        npcmd=(timeout 180 $PIN $B/ncclperf -coll $coll $CAL_ARGS -compare "$NCCL_LIB" $GO -hosttime)
        for who in $( ((r % 2)) && echo "nt np" || echo "np nt"); do
          f="$CAL/$coll-$who-$r.txt"
          if [[ $who == nt ]]; then t "${ntcmd[@]}" > "$f" 2>&1 || tail -3 "$f"
          else t "${npcmd[@]}" > "$f" 2>&1 || tail -3 "$f"; fi
        done
      done
      # nccl-tests' own host time per iteration up to ${CAL_HOST_E:-4M} (-C 1: the issue loop
      # before the drain, what ncclperf's -hosttime prints).
      t timeout 60 $PIN "$NT/${nt}_perf" ${CAL_ARGS/-e ${CAL_E:-1G}/-e ${CAL_HOST_E:-4M}} -C 1 > "$CAL/$coll-ntcpu.txt" 2>&1 || tail -3 "$CAL/$coll-ntcpu.txt"
      grep -hE '^# (ncclgo|reference|measured):' "$CAL/$coll-np-1.txt" | head -2
      # Per size (rows joined by the size column; nccl-tests' 0-byte rows of no-ops, where a
      # rank's chunk rounds to nothing, left out): the median over rounds of each harness's
      # out-of-place time (column 6 of nccl-tests and of ncclperf alone; with ncclgo, NCCL's is
      # column 14 and ncclgo's 6), their ratio, each harness's spread over rounds (max / min)
      # and each one's host time per iteration (the issue loop alone: ncclperf -hosttime,
      # nccl-tests -C 1).
      awk -v coll=$coll '
        function sortn(a, n,   i, j, v) {
          for (i = 2; i <= n; i++) { v = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
        }
        function stat(s, what,   n, a) {
          n = split(s, a, " ")
          if (n == 0) return -1
          sortn(a, n)
          if (what == "spread") return a[1] > 0 ? a[n] / a[1] : 0
          return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        FNR == 1 { isnt = FILENAME ~ /-nt-[0-9]+\.txt$/; iscpu = FILENAME ~ /-ntcpu\.txt$/ }
        iscpu && $1 ~ /^[0-9]+$/ && NF >= 13 { nthost[$1 + 0] = nthost[$1 + 0] " " $6; next }
        $1 ~ /^[0-9]+$/ && NF >= 13 {
          s = $1 + 0
          if (s == 0) { zero++; next }
          seen[s] = 1
          if (isnt) nt[s] = nt[s] " " $6
          else if (NF >= 17) { np[s] = np[s] " " $14; go[s] = go[s] " " $6; hasgo = 1 }
          else np[s] = np[s] " " $6
        }
        $1 == "#" && $2 ~ /^[0-9]+$/ && $3 == "host" && !isnt && !iscpu { host[$2 + 0] = host[$2 + 0] " " $NF }
        END {
          for (s in seen) sz[++ns] = s + 0
          sortn(sz, ns)
          printf "# %s: median out-of-place time (us) over rounds; ratio = ncclperf / nccl-tests; spread = max / min over rounds", coll
          printf "%s\n", zero ? sprintf("; %d nccl-tests 0-byte rows (no-ops) left out", zero) : ""
          printf "#%11s %11s %14s %7s %9s %9s %9s %9s %9s", "size(B)", "nccl-tests", "ncclperf-NCCL", "ratio", "within5%", "nt-spread", "np-spread", "nt-host", "np-host"
          if (hasgo) printf " %9s %14s", "ncclgo", "ncclgo/tests"
          printf "\n"
          for (k = 1; k <= ns; k++) {
            s = sz[k]; a = stat(nt[s]); b = stat(np[s]); n++
            if (a < 0 || b < 0) {
              ok = "MISSING"; q = 0
            } else {
              q = b / a; ok = (q >= 0.95 && q <= 1.05) ? "yes" : "NO"
            }
            if (ok == "yes") good++; else bad = bad sprintf(" %d:%s", s, a < 0 || b < 0 ? (a < 0 ? "no-nccl-tests-row" : "no-ncclperf-row") : sprintf("%.3f", q))
            printf "%12d %11.2f %14.2f %7.3f %9s %9.2f %9.2f %9.2f %9.2f", s, a, b, q, ok, stat(nt[s], "spread"), stat(np[s], "spread"), stat(nthost[s]), stat(host[s])
            if (hasgo) { g = stat(go[s]); printf " %9.2f %14.3f", g, (a > 0 ? g / a : 0) }
            printf "\n"
          }
          printf "# %-13s %d sizes, %d within 5 %%%s\n", coll, n, good, (bad ? "; outside:" bad : "")
        }' "$CAL"/$coll-nt-*.txt "$CAL"/$coll-np-*.txt "$CAL/$coll-ntcpu.txt" | tee -a "$OUT/calibrate.txt"
    done
    if [[ "${CAL_DIAG:-1}" != 0 ]]; then
      # What NCCL chose and was asked, per call, in each harness: one short sweep each with
      # NCCL_DEBUG=INFO (INIT, ENV, TUNING: algorithm, protocol, channels per size on rank 0;
      # COLL: count, type, op, root per call; plugins, channels, tuning tables), pointers,
      # opCounts and timings normalised away, unique lines compared. Left out: count-0 calls
      # (nccl-tests' no-op rows), the init API's own name, pids and hashes, and the variable
      # by which ncclperf gives NCCL nccl-tests' nvlinkCentricSched.
      norm() {
        sed -n 's/.*NCCL INFO //p' "$1" | sed -E 's/0x[0-9a-fA-F]+/P/g; s/opCount [0-9a-fA-F]+/opCount N/; s/[0-9]+\.[0-9]+ ?(s|ms|us|seconds)\b/T/g' \
          | grep -vE ' count 0 |Init (START|COMPLETE)|[Tt]imings|ncclCommInit|commId|[Pp]id|[Hh]ash|NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE' \
          | sort -u
      }
      echo "# NCCL's choices and arguments (NCCL_DEBUG=INFO, INIT,ENV,TUNING,COLL; $DIAG_ARGS): unique lines that differ" >> "$OUT/calibrate.txt"
      for coll in allreduce allgather reducescatter broadcast; do
        case $coll in allreduce) nt=all_reduce;; allgather) nt=all_gather;; reducescatter) nt=reduce_scatter;; broadcast) nt=broadcast;; esac
        # NCCL_DEBUG_FILE is line-buffered; NCCL's stdout would lose its tail when Go exits.
        export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING,COLL
        NCCL_DEBUG_FILE="$CAL/diag-$coll-nt.log" timeout 60 $PIN "$NT/${nt}_perf" $DIAG_ARGS > "$CAL/diag-$coll-nt.txt" 2>&1
        NCCL_DEBUG_FILE="$CAL/diag-$coll-np.log" timeout 60 $PIN $B/ncclperf -coll $coll $DIAG_ARGS -compare "$NCCL_LIB" -ncclgo=false > "$CAL/diag-$coll-np.txt" 2>&1
        unset NCCL_DEBUG NCCL_DEBUG_SUBSYS
        diff <(norm "$CAL/diag-$coll-nt.log") <(norm "$CAL/diag-$coll-np.log") > "$CAL/diag-$coll.diff"
        nd=$(grep -c '^[<>]' "$CAL/diag-$coll.diff")
        nt_algo=$(norm "$CAL/diag-$coll-nt.log" | grep -c 'Bytes -> Algo')
        echo "# $coll-diag: $nd differing lines (< nccl-tests, > ncclperf); $nt_algo algorithm choices seen" | tee -a "$OUT/calibrate.txt"
        grep '^[<>]' "$CAL/diag-$coll.diff" | head -${CAL_DIAG_LINES:-12} | sed 's/^/#   /' >> "$OUT/calibrate.txt"
      done
    fi
    echo "== calibration verdict ($(( $(date +%s) - cal_start )) s of runs; table in $OUT/calibrate.txt)"
    grep -E '^# (allreduce|allgather|reducescatter|broadcast)[ -]' "$OUT/calibrate.txt"
  fi
  tar -czf "$OUT/calibrate-raw.tgz" -C "$(dirname "$CAL")" "$(basename "$CAL")" && echo "raw outputs: $OUT/calibrate-raw.tgz ($(ls "$CAL" | wc -l) files)"
fi
