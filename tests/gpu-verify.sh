#!/usr/bin/env bash
# The GPU machine's verification run, from a bundle built by `make bundle`
# (that machine has nvcc but no Go). STEPS (a list; default "build perf
# tests") picks what runs, in this order:
#
#   build           the full kernel set (sm_90) and its build times (full,
#                   no-op, one changed unit)
#   perf            ncclperf benchmarks, against the machine's NCCL
#   latency         8 B diagnostics: enqueue time, CPU profiles, protocols forced, the
#                   driver's costs, launch paths side by side (LAT_ROUNDS)
#   tests           every bundle/tests/*.test (TESTFLAGS)
#   suite           tests.test -test.short -run ${SUITE_RUN:-TestCollectives|TestSendRecv}
#                   with NCCLGO_TEST_RANKS=${SUITE_RANKS:-1,2,4} (SUITE_DEVICES)
#   graph           CUDA graph capture (issue 26.1): runtime_cuda.test '^TestGPUGraph' (capture, records beside, holds);
#                   tests.test -run TestGraph (NCCLGO_GRAPH_RANKS=${GRAPH_RANKS:-1,2,4},
#                   ${GRAPH_REPLAYS:-1000} replays, GRAPH_DEVICES); ncclperf -G 100 -b 8 -e 8
#                   -n 100 -c 1 with -g 1 and (2 GPUs) -g 2, and -g 2 -graph-one (one graph
#                   for both ranks); nccl-tests all_reduce_perf -G 100
#                   on libnccl.so.2 (threads, -g ${GRAPH_NT_G:-2}; GRAPH_MPI=1 adds 2 processes
#                   under mpirun); torch.cuda.graph (tests/torch/run.sh STEPS=graph,
#                   LIBS=ncclgo, NPROC=${GRAPH_TORCH_NPROC:-2}). Target: at most 3 µs per
#                   replayed 8 B AllReduce
#   hang            the two-GPU first-collective hang (docs/notes/20261130-hang-2gpu.md): HANG_RUNS
#                   (30) runs of examples/slim on devices 0,1 and UNEVEN_RUNS (6) of
#                   TestGroupedUnevenPlacement, counted, for each of HANG_VARIANTS
#                   ("plain"; "e1": NCCL_DEBUG=INFO COLL on every run and the ranks'
#                   choices compared, "e2": NCCL_PROTO=SIMPLE, "e2ring": NCCL_ALGO=RING);
#                   then one run of each with NCCL_DEBUG=INFO INIT,ENV,TUNING,COLL.
#                   HANG_ENV adds environment to every run ("NCCL_NCHANNELS=1 ...")
#   mp              the multi-process matrix (MP_CASES: p2p shm ipc 2x2 refused kill
#                   mps2 mps4 mpsipc mpsshm mpswin mpsvmm mpsstress mpsleak; MPS started for the mps cases and always stopped);
#                   MP_FULL=1 drops -test.short
#   hosts           fake hosts (NCCL_HOSTID per process, all on GPU 0 under MPS): the
#                   multi-process suite over 2, 3, 4 hosts x 1, 2 ranks per host x
#                   NCCL_ALGO/NCCL_PROTO forced (transports checked: NET across,
#                   P2P/SHM inside), the kill test across hosts, nccl-tests over
#                   mpirun with a host per process, two runs through the test net
#                   plugin (NCCL_NET_PLUGIN; HOSTS_PLUGIN=0 skips) (HOSTS_* below the step's head)
#   stress          TestStress, TestStressTwoFullComms, TestDestroyBounded on GPU 0
#                   and on GPUs 0,1 (STRESS_SHAPES, STRESS_BUDGET)
#   capi            capi_test gpu, then nccl-tests on ncclgo's libnccl.so.2 and on
#                   the machine's NCCL (capi/test/nccl-tests.sh; NT_TESTS, NT_ARGS)
#   torch           tests/torch/run.sh for each of TORCH_NPROCS ("2 3 4") processes,
#                   under MPS where they outnumber the GPUs (TORCH_STEPS, TORCH_METHOD;
#                   TORCH_HOSTS=H: H fake hosts, an NCCL_HOSTID per block of ranks)
#   np              ncclperf -np 2 -c 1 -compare NCCL_LIB (NP_COLLS, NP_E), then the
#                   kill test: rank 1 SIGKILLed mid-sweep, the job must end, non-zero,
#                   naming it, within NP_KILL_LIMIT (20) s
#   split           ncclgo.test -run 'Split|Shrink'
#   shared          issue 25's acceptance on one GPU in one step: ncclperf -c 1 sweeps
#                   ${SHARED_B:-1M} to ${SHARED_E:-1G} by ${SHARED_F:-2} for each placement
#                   (ranks in one process: -g 2 every collective, -g 4 and -g 8 AllReduce;
#                   processes under MPS: -np 2 with and without windows (-R 2), at 50 %,
#                   and -np 4 -R 2 at 25 %), 0 wrong everywhere, and the cliff rule (from
#                   1 MiB up no size more than 10 % below the next smaller one), one
#                   line per sweep with its largest-size figure
#   random          TestRandom on GPUs 0,1 and on GPU 0 (RANDOM_BUDGET, 40s each)
#   multigpu-tests  the suite with NCCLGO_TEST_DEVICES=0..N-1, NCCLGO_TEST_RANKS=${MG_RANKS:-N}
#                   (MG_RANKS=2,4,8: rank r on GPU r), then TestGPUSeveralGPUs
#   multigpu-perf   ncclperf -compare NCCL_LIB for allreduce, allgather, reducescatter,
#                   broadcast, 8 B to ${MG_MAX:-8G}, -f ${MG_F:-2}, -g N
#   multigpu        both
#   calibrate       nccl-tests (built from NCCL_TESTS_SRC, default third_party/nccl-tests)
#                   and ncclperf's NCCL column on the same library (see below)
#
# e.g. STEPS="build hang mp stress" OUT=$OUT bash tests/gpu-verify.sh
#
# Output: at most 8 files in $OUT (default build/verify), in practice two:
# $OUT/summary.txt, one verdict line per step (PASS, FAIL, SKIP with the
# reason, or INFO), and $OUT/logs.tgz, every log of the run (the directory
# verify-logs/; rewritten after each step, so a run cut short still leaves
# the logs of the steps it finished). The key lines go to stdout. Every
# command runs under `timeout` (SIGQUIT first: a Go program prints its
# goroutines), and all steps together stay within VERIFY_BUDGET seconds
# (default 570: one device call of 10 minutes, with room for the tarball);
# a step that would start with less than 20 s left is skipped, and says so.
# NGPUS (default: from nvidia-smi) decides which steps need 2 GPUs; those
# skip on one, naming the reason.
#
# calibrate (issue 17): nccl-tests, built here from the source tree in
# NCCL_TESTS_SRC (default third_party/nccl-tests, a copy of
# github.com/NVIDIA/nccl-tests; git-ignored) against NCCL_LIB's headers, and
# ncclperf's NCCL column on the same library, back to back in one lease:
# AllReduce, AllGather, ReduceScatter and Broadcast, ${CAL_B:-8} to
# ${CAL_E:-1G} by ${CAL_F:-2}, -g ${CAL_G:-2}, -n ${CAL_N:-200} -w ${CAL_W:-20}
# -c 0, ${CAL_ROUNDS:-3} rounds (nccl-tests first in odd rounds, ncclperf in
# even ones), both under `taskset -c $CAL_CPUS` when it is set (auto: GPU 0's
# local CPUs). calibrate.txt (in logs.tgz) has, per size (rows joined by size), the
# median out-of-place time of each, their ratio, whether they agree within
# 5 %, each one's spread over rounds and host time per iteration (and
# ncclgo's own column when a fatbin is present and CAL_NCCLGO is not 0);
# then, unless CAL_DIAG=0, the lines of NCCL_DEBUG=INFO (algorithm, protocol
# and channels per size; count, type, op, root per call; env and init) that
# differ between the two harnesses on a short sweep to ${CAL_DIAG_E:-4M}.
# ncclloop (tests/calib/ncclloop.c, built with cc unless CAL_LOOP=0; it
# loads NCCL and the CUDA runtime CUDART with dlopen) runs nccl-tests' loop
# in C in every round, to ${CAL_LOOP_E:-4M}, and a second table per
# collective sets it between the two harnesses; CAL_NP_ENV is environment
# for ncclperf's runs alone (e.g. "GODEBUG=asyncpreemptoff=1 GOMAXPROCS=2").
# Each run is -N ${CAL_CYCLES:-5} cycles (nccl-tests' -N, ncclperf's -N);
# CAL_RANGES ("8:4M:10 8M:1G:2": MIN:MAX:ROUNDS) splits the sweep, so that
# the small sizes, where each process lands in a fast or a slow mode, get
# more processes; CAL_STAT judges agreement on bestproc (default: the lowest
# of each harness's per-process medians over cycles), median (over all
# rounds x cycles) or best (the best cycle); CAL_LIBS ("nccl ncclgo") runs
# the whole comparison on the machine's NCCL and then on ncclgo's
# libnccl.so.2 (nccl-tests through LD_LIBRARY_PATH, ncclperf's column by
# dlopen); CAL_BISECT=1 runs tests/calib/bisect.sh's harness variants first.
# Raw outputs, the nccl-tests build log and the machine's CPU and GPU
# topology: verify-logs/calibrate/. The step needs the GPUs only, not the
# fatbin: STEPS=calibrate is enough. On two H200s: nccl-tests' build (four
# binaries, sm_90) about 1-2 min, the runs about 2 min with CAL_NCCLGO=0 and
# 3 rounds, the diagnostics about 30 s.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD
OUT=${OUT:-build/verify}
mkdir -p "$OUT" build && OUT=$(cd "$OUT" && pwd)
# Every log goes to $L; $OUT/logs.tgz is its tarball.
L=$ROOT/build/verify-logs
rm -rf "$L" && mkdir -p "$L"
SUMMARY=$OUT/summary.txt
export NCCL_NVLS_ENABLE=0
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
JOBS=${JOBS:-$(nproc)}
STEPS=${STEPS:-build perf tests}
[[ " $STEPS " == *" multigpu "* ]] && STEPS="$STEPS multigpu-tests multigpu-perf"
B=bundle/bin
T=$ROOT/bundle/tests
T0=$SECONDS
VERIFY_BUDGET=${VERIFY_BUDGET:-570}

t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "elapsed $(( ($(date +%s%N) - s) / 1000000 )) ms (rc=$rc): $*"; return $rc; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
has_any() { local s; for s in "$@"; do has "$s" && return 0; done; return 1; }
left() { echo $((VERIFY_BUDGET - (SECONDS - T0))); }
# lim N: N seconds, or what the budget has left (less 15 s), whichever is less.
# Never 0: `timeout 0` would not time out at all.
lim() { local l=$(($(left) - 15)); ((l < $1)) && echo $((l > 1 ? l : 1)) || echo "$1"; }
# bt [-C DIR] NAME N CMD...: CMD (in DIR) under timeout (lim N), output in
# $L/NAME.log; prints "== NAME rc=R Ns"; rc 124/131/137: killed at the
# limit; 125: not started.
bt() {
  local dir=.
  [[ $1 == -C ]] && { dir=$2; shift 2; }
  local name=$1 to=$2 l=$(($(left) - 15)); shift 2
  local log=$L/$name.log s=$SECONDS rc
  ((to > l)) && to=$l
  mkdir -p "$(dirname "$log")"
  if ((l < 5)); then echo "not started: out of VERIFY_BUDGET=${VERIFY_BUDGET}s" > "$log"; echo "== $name not started (budget)"; return 125; fi
  printf '%q ' "$@" > "$log"; echo "  # timeout ${to}s" >> "$log"
  # In the background, so that INT or TERM reach the trap at once (it stops the command).
  (cd "$dir" && exec timeout -s QUIT -k 10 "$to" "$@") >> "$log" 2>&1 &
  CUR=$!; wait $CUR; rc=$?; CUR=""
  ((rc == 124 || rc == 131 || rc == 137)) && echo "TIMEOUT: killed after ${to}s" >> "$log"
  echo "== $name rc=$rc $((SECONDS - s))s"
  return $rc
}
# secs D: a Go-style duration ("40s", "2m", "90") in whole seconds.
secs() { case $1 in *m) echo $((${1%m} * 60));; *s) echo "${1%s}";; *) echo "$1";; esac; }
# verdict STEP STATUS DETAIL: one line in $OUT/summary.txt (and stdout).
verdict() { printf '%-14s %-4s %4ss  %s\n' "$1" "$2" "${STEP_T:-0}" "$3" | tee -a "$SUMMARY"; }
# begin STEP: starts a step's clock; false (and a SKIP line) when the budget is spent.
begin() {
  STEP_T=0; STEP_S=$SECONDS
  echo; echo "######## $1 ($(left) s of VERIFY_BUDGET left)"
  if (($(left) < 20)); then verdict "$1" SKIP "out of VERIFY_BUDGET=${VERIFY_BUDGET}s"; return 1; fi
}
# done_ STEP STATUS DETAIL: the step's verdict with its time, then the tarball.
done_() { STEP_T=$((SECONDS - STEP_S)); verdict "$@"; pack; }
pack() {
  tar -czf "$OUT/logs.tgz.tmp" -C "$(dirname "$L")" "$(basename "$L")" 2>/dev/null && mv -f "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"
}
# gotest NAME: the top-level --- PASS/FAIL/SKIP counts of $L/NAME.log.
gocount() {
  local f=$L/$1.log
  echo "$(grep -c '^--- PASS' "$f") passed, $(grep -c '^--- FAIL' "$f") failed, $(grep -c '^--- SKIP' "$f") skipped"
}
# gook NAME RC: the go test run passed (rc 0, no FAIL, at least one PASS or ok).
gook() { (($2 == 0)) && ! grep -qE '^(--- FAIL|FAIL|panic)' "$L/$1.log" && grep -qE '^(--- PASS|ok|PASS)' "$L/$1.log"; }
# children PID: the processes whose parent is PID.
children() {
  local p
  for p in /proc/[0-9]*/stat; do
    [[ $(sed -E 's/.*\) [A-Za-z] ([0-9]+) .*/\1/' "$p" 2>/dev/null) == "$1" ]] && { p=${p#/proc/}; echo "${p%/stat}"; }
  done
}

MPS_DIR=$ROOT/build/mps MPS_ON=0
mps_env() { env CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log" "$@"; }
mps_stop() {
  ((MPS_ON)) || return 0
  echo quit | mps_env timeout 20 nvidia-cuda-mps-control
  local i; for i in $(seq 1 20); do [[ -e $MPS_DIR/pipe/control ]] || break; sleep 0.5; done
  MPS_ON=0
  mkdir -p "$L/mp" && cp -r "$MPS_DIR/log" "$L/mp/mps-log" 2>/dev/null
  echo "MPS stopped"
}
# mps_start: starts the MPS control daemon in $MPS_DIR (mps_stop and the EXIT trap stop it).
mps_start() {
  mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
  MPS_ON=1
  if mps_env nvidia-cuda-mps-control -d; then sleep 1; echo "MPS started ($MPS_DIR)"; return 0; fi
  MPS_ON=0; return 1
}
cleanup() { mps_stop; pack; }
trap cleanup EXIT
CUR=""
trap 'echo "interrupted"; [[ -n $CUR ]] && kill -TERM "$CUR" 2>/dev/null; exit 130' INT TERM

echo "# gpu-verify $(date -u +%Y-%m-%dT%H:%M:%SZ) STEPS=\"$STEPS\" VERIFY_BUDGET=$VERIFY_BUDGET" | tee -a "$SUMMARY"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; $NVCC --version | tail -2; } 2>&1 | tee "$L/machine.txt"
NGPUS=${NGPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)}
DEVS=$(seq -s, 0 $((NGPUS - 1)))
NCCL_LIB=${NCCL_LIB:-}
for cand in /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2 \
            $(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF}') \
            $(find /opt /usr -name 'libnccl.so.2*' 2>/dev/null); do
  [[ -z "$NCCL_LIB" && -e "$cand" ]] && NCCL_LIB=$cand
done
echo "GPUs: $NGPUS; NCCL: ${NCCL_LIB:-none found}" | tee -a "$L/machine.txt"
export NCCLGO_FATBIN=${NCCLGO_FATBIN:-$ROOT/build/ncclgo.fatbin}
# Steps run tests from their package's directory (bt -C): a relative
# path would name no file there, and every test would skip.
[[ $NCCLGO_FATBIN == /* ]] || NCCLGO_FATBIN=$ROOT/$NCCLGO_FATBIN

if has build && begin build; then
  {
  echo "== full build (sm_90, -j $JOBS)"
  t timeout $(lim 300) $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache --out build/ncclgo.fatbin 2>&1 | tail -4
  echo "== no-op rebuild"
  t timeout $(lim 60) $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache --out build/ncclgo.fatbin 2>&1 | tail -2
  echo "== one changed translation unit"
  echo "// changed" >> generated/cuda/all_reduce_sum_f32.cu
  t timeout $(lim 120) $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache --out build/ncclgo.fatbin 2>&1 | tail -2
  sed -i '$d' generated/cuda/all_reduce_sum_f32.cu
  # A kernel set is the fatbin behind a manifest: cuobjdump reads the bare image.
  $B/ncclgen inspect build/ncclgo.fatbin --fatbin build/ncclgo.bare.fatbin
  cuobjdump -lelf -lptx build/ncclgo.bare.fatbin | head -5
  # The count is the manifest's, as ncclgen read it back from the image (inspect's
  # "kernels:"); cuobjdump's listing of the bare image is kept for the log.
  nk=$(ncclgen_kernels=$($B/ncclgen inspect build/ncclgo.fatbin 2>/dev/null | sed -n 's/^kernels: *//p'); echo "${ncclgen_kernels:-0}")
  echo "kernels in the image: $nk"
  } 2>&1 | tee "$L/build.log"
  nk=$(sed -n 's/^kernels in the image: //p' "$L/build.log")
  if [[ -s build/ncclgo.fatbin ]] && ((${nk:-0} > 0)); then
    done_ build PASS "build/ncclgo.fatbin, $nk kernels; $(grep -E '^elapsed' "$L/build.log" | awk '{printf "%s%s ms", sep, $2; sep=", "}') (full, no-op, one unit)"
  else
    done_ build FAIL "no kernel image (build/ncclgo.fatbin: ${nk:-0} kernels); see build.log"
  fi
fi

# Steps that run kernels need the full set: build it once (no timings) when
# the build step did not run and no earlier call on this machine left one.
if [[ ! -s $NCCLGO_FATBIN ]] && has_any perf latency tests suite graph mp hosts stress capi torch np split random random-bg multigpu-tests multigpu-perf && begin fatbin; then
  bt fatbin 300 $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache --out "$NCCLGO_FATBIN"
  rc=$?; tail -2 "$L/fatbin.log"
  [[ -s $NCCLGO_FATBIN ]] && done_ fatbin PASS "built $NCCLGO_FATBIN (rc=$rc)" || done_ fatbin FAIL "no $NCCLGO_FATBIN (rc=$rc, fatbin.log)"
fi

# random-bg: TestRandom on GPU 0 for RANDOM_BG_BUDGET (default 10m) in a
# session of its own, so that it outlives this call (the device machine
# keeps such processes until it is given back) while later steps and calls
# run; random-collect (in a later call on the same warm machine) waits for
# it, within the budget, and gives the verdict.
RBG=$ROOT/build/random-bg
if has random-bg && begin random-bg; then
  mkdir -p "$RBG" && rm -f "$RBG"/*
  rb=$(secs "${RANDOM_BG_BUDGET:-10m}")
  # setsid: a session of its own, which the device machine leaves running
  # after the call returns; the rc file says when it is done.
  env NCCLGO_TEST_DEVICES="${RANDOM_BG_DEVICES:-0}" NCCLGO_RANDOM_BUDGET="${rb}s" NCCLGO_TEST_WAIT=30s \
    setsid bash -c 'cd tests && timeout -s QUIT -k 10 "$1" "$2" -test.v -test.count=1 -test.run "TestRandom$" -test.timeout "$3" > "$4/random.log" 2>&1; echo "rc=$?" > "$4/rc"' \
    _ $((rb + 120)) "$T/tests.test" $((rb + 110))s "$RBG" < /dev/null > /dev/null 2>&1 &
  sleep 5; head -5 "$RBG/random.log"
  done_ random-bg INFO "started: TestRandom on devices ${RANDOM_BG_DEVICES:-0}, budget ${rb}s, log build/random-bg/random.log"
fi
if has perf && begin perf; then
  CMP=${NCCL_LIB:+-compare $NCCL_LIB}
  if ((NGPUS < 2)) && [[ -z "${FORCE_COMPARE:-}" ]]; then
    # NCCL before 2.30 refuses ranks that share a GPU; FORCE_COMPARE=1 tries anyway.
    CMP=""
  fi
  bad=0
  {
  echo "== ncclperf (reference: ${CMP:-none})"
  t timeout $(lim 60) $B/ncclperf -coll allreduce -b 8 -e 8 -g 2 -n 200 -w 20 $CMP || bad=$((bad + 1))
  t timeout $(lim 90) $B/ncclperf -coll allreduce -b 512M -e 512M -g 2 -n 10 -w 3 $CMP || bad=$((bad + 1))
  t timeout $(lim 60) $B/ncclperf -coll allreduce -b 8 -e 8 -g 8 -n 50 -w 5 || bad=$((bad + 1))
  # Point-to-point (direct SIMPLE between ranks of one process), checked.
  t timeout $(lim 90) $B/ncclperf -coll sendrecv -b 8 -e 256M -f 8 -g 2 -n 20 -w 5 || bad=$((bad + 1))
  t timeout $(lim 120) $B/ncclperf -coll alltoall -b 1K -e 256M -f 8 -g 4 -n 20 -w 5 || bad=$((bad + 1))
  echo "failed commands: $bad"
  } 2>&1 | tee "$L/perf.log"
  bad=$(sed -n 's/^failed commands: //p' "$L/perf.log")
  nw=$(grep -c 'Out of bounds values : [1-9]' "$L/perf.log")
  ((bad == 0 && nw == 0)) && done_ perf PASS "5 ncclperf runs, reference ${CMP:-none}" \
    || done_ perf FAIL "$bad of 5 ncclperf runs failed, $nw with wrong values (perf.log)"
fi

if has latency && begin latency; then
  # Small-message latency diagnostics: the enqueue loop's own time next to
  # the total, a CPU profile of 2 and 8 ranks, and each protocol forced.
  {
  echo "== latency (8 B AllReduce)"
  timeout $(lim 120) $B/ncclperf -coll allreduce -b 8 -e 8 -g 2 -n 20000 -w 200 -hosttime -cpuprofile "$L/ar8-2ranks.prof" | grep -v '^# [a-zA-Z]'
  timeout $(lim 120) $B/ncclperf -coll allreduce -b 8 -e 8 -g 8 -n 5000 -w 100 -hosttime -cpuprofile "$L/ar8-8ranks.prof" | grep -v '^# [a-zA-Z]'
  timeout $(lim 60) $B/ncclperf -coll allreduce -b 8 -e 8 -g 1 -n 5000 -w 100 -hosttime | grep -v '^# [a-zA-Z]'
  for p in LL LL128 SIMPLE; do for ch in 1 2; do
    echo "-- NCCL_PROTO=$p NCCL_NCHANNELS=$ch"
    NCCL_PROTO=$p NCCL_NCHANNELS=$ch timeout $(lim 60) $B/ncclperf -coll allreduce -b 8 -e 8 -g 2 -n 5000 -w 100 -hosttime | grep -E '^ +[0-9]|host'
  done; done
  echo "-- 200 iterations (fewer than the launch queue holds: the enqueue time is the host's own)"
  for g in 2 8; do timeout $(lim 60) $B/ncclperf -coll allreduce -b 8 -e 8 -g $g -n 200 -w 200 -hosttime | grep -E '^ +[0-9]|host'; done
  NCCL_DEBUG=INFO timeout $(lim 30) $B/ncclperf -coll allreduce -b 8 -e 8 -g 2 -n 2 -w 0 2>&1 | grep -E 'AllReduce 8 bytes' | head -2
  echo "-- the driver's own launch cost (wall/*: timed with the GPU's work)"
  (cd runtime/cuda && timeout $(lim 120) "$T/runtime_cuda.test" -test.run XXX -test.bench GPULaunch -test.benchtime 20000x 2>&1 | grep -E 'Benchmark|FAIL')
  echo "-- launch paths side by side (tests/ab.sh, ${LAT_ROUNDS:-5} rounds): launch graphs (the default), cuLaunchKernel, join graphs, one pass off, a launch per rank"
  for g in 2 8; do
    VARIANTS="graph|$B/ncclperf"$'\n'"plain|$B/ncclperf|NCCLGO_KERNEL_GRAPH=0"$'\n'"joins|$B/ncclperf|NCCLGO_KERNEL_GRAPH=joins"$'\n'"nopass|$B/ncclperf|NCCLGO_ONE_PASS=0"$'\n'"perrank|$B/ncclperf|NCCLGO_ONE_LAUNCH=0" \
      ARGS="-g $g -b 8 -e 8 -n 20000 -w 1000 -c 0" ROUNDS=${LAT_ROUNDS:-5} CPUS=4-11 TIMEOUT=$(lim 60) OUT="$L/ab-g$g" bash tests/ab.sh
  done
  echo "-- join graphs checked (-c 1)"
  for g in 2 8; do NCCLGO_KERNEL_GRAPH=joins timeout $(lim 60) $B/ncclperf -coll allreduce -g $g -b 8 -e 1M -f 8 -n 20 -c 1 | grep -E '^ +[0-9]+ ' | awk '{w += $9 + $13} END {print "g='$g' joins: " NR " sizes, " w + 0 " wrong"}'; done
  } 2>&1 | tee "$L/latency.log"
  done_ latency INFO "diagnostics in latency.log, CPU profiles ar8-*.prof (go tool pprof -top)"
fi

if has tests && begin tests; then
  res=""
  for bin in bundle/tests/*.test; do
    name=$(basename "$bin" .test); dir=${name//_//}; [[ $name == ncclgo ]] && dir=.
    echo "== $name"
    (cd "$dir" && t timeout $(lim 500) "$ROOT/$bin" -test.count=1 -test.timeout=8m ${TESTFLAGS:-} > "$L/$name.log" 2>&1)
    rc=$?
    grep -E '^(--- FAIL|FAIL|ok|PASS|panic)|elapsed' "$L/$name.log" | tail -${TAIL:-25}
    gook "$name" $rc && res="$res $name:ok" || res="$res $name:FAIL(rc=$rc)"
  done
  [[ $res == *FAIL* ]] && done_ tests FAIL "$res" || done_ tests PASS "$res"
fi

if has suite && begin suite; then
  bt -C tests suite ${SUITE_TO:-300} env NCCLGO_TEST_RANKS=${SUITE_RANKS:-1,2,4} NCCLGO_TEST_LARGE=0 NCCLGO_TEST_WAIT=20s \
    ${SUITE_DEVICES:+NCCLGO_TEST_DEVICES=$SUITE_DEVICES} \
    "$T/tests.test" -test.short -test.count=1 -test.v -test.run "${SUITE_RUN:-TestCollectives|TestSendRecv}" -test.timeout $(lim ${SUITE_TO:-300})s
  rc=$?
  grep -E "^(--- |ok|FAIL|PASS)|^    --- FAIL|seed" "$L/suite.log" | head -20; grep -m5 "checks\|wrong" "$L/suite.log"
  npass=$(grep -c -- '--- PASS' "$L/suite.log")
  sub="subtests $npass passed, $(grep -c -- '--- FAIL' "$L/suite.log") failed"
  if ((npass == 0)); then
    # Every test skipped (no kernel image, say): nothing was checked.
    done_ suite FAIL "ranks ${SUITE_RANKS:-1,2,4}: nothing passed: $(grep -m1 -o 'SKIP.*\|no kernel image[^;]*' "$L/suite.log" | head -1)"
  elif gook suite $rc; then done_ suite PASS "ranks ${SUITE_RANKS:-1,2,4}: $sub"
  else done_ suite FAIL "rc=$rc, ranks ${SUITE_RANKS:-1,2,4}: $sub"; fi
fi


if has graph && begin graph; then
  mkdir -p "$L/graph"
  st=PASS
  bt -C runtime/cuda graph/cuda 60 "$T/runtime_cuda.test" -test.run '^TestGPUGraph' -test.v -test.count=1; rc=$?
  gook graph/cuda $rc || st=FAIL
  res="runtime/cuda: $(gocount graph/cuda)"
  bt -C tests graph/tests ${GRAPH_TO:-240} env NCCLGO_GRAPH_RANKS=${GRAPH_RANKS:-1,2,4} NCCLGO_GRAPH_REPLAYS=${GRAPH_REPLAYS:-1000} \
    NCCLGO_TEST_WAIT=20s NCCLGO_TEST_LARGE=0 ${GRAPH_DEVICES:+NCCLGO_TEST_DEVICES=$GRAPH_DEVICES} \
    "$T/tests.test" -test.count=1 -test.v -test.run 'TestGraph' -test.timeout $(lim ${GRAPH_TO:-240})s; rc=$?
  grep -E "^(--- |ok|FAIL|PASS)|^    --- FAIL|batch|per replay" "$L/graph/tests.log" | head -30
  gook graph/tests $rc || st=FAIL
  res="$res; tests: $(grep -c -- '--- PASS' "$L/graph/tests.log") subtests passed, $(grep -c -- '--- FAIL' "$L/graph/tests.log") failed, $(grep -c -- '--- SKIP' "$L/graph/tests.log") skipped"
  # Time per replayed 8 B AllReduce: ncclperf -G prints one row per size (time in column 4).
  for g in 1 2; do
    ((g > NGPUS)) && continue
    bt graph/ncclperf-g$g 90 $B/ncclperf -G 100 -b 8 -e 8 -n 100 -c 1 -g $g; rc=$?
    cat "$L/graph/ncclperf-g$g.log"
    row=$(awk '$1 == 8 {print "time " $4 " us, #wrong " $7}' "$L/graph/ncclperf-g$g.log")
    ((rc)) && st=FAIL
    [[ $row == *"#wrong 0" ]] || st=FAIL
    res="$res; ncclperf -G 100 -g $g: ${row:-no row} (rc=$rc)"
  done
  # The ranks of one process captured into one graph (-graph-one: one
  # captured multi-rank launch per call), 2 ranks on GPU 0 or one each.
  bt graph/ncclperf-one 90 $B/ncclperf -G 100 -b 8 -e 8 -n 100 -c 1 -g 2 -graph-one; rc=$?
  cat "$L/graph/ncclperf-one.log"
  row=$(awk '$1 == 8 {print "time " $4 " us, #wrong " $7}' "$L/graph/ncclperf-one.log")
  ((rc)) && st=FAIL
  [[ $row == *"#wrong 0" ]] || st=FAIL
  res="$res; ncclperf -G 100 -g 2 -graph-one: ${row:-no row} (rc=$rc)"
  SRC=${NCCL_TESTS_SRC:-third_party/nccl-tests}
  if [[ ! -f $SRC/src/common.cu ]]; then
    res="$res; nccl-tests: skipped (no $SRC/src/common.cu: carry third_party/nccl-tests)"
  else
    sys=none; [[ -n $NCCL_LIB ]] && sys=$(dirname "$(readlink -f "$NCCL_LIB")")
    ntg=${GRAPH_NT_G:-2}; ((ntg > NGPUS)) && ntg=$NGPUS
    runs=("threads -g $ntg")
    [[ ${GRAPH_MPI:-0} == 1 ]] && runs+=("mpi -g 1")
    for run in "${runs[@]}"; do
      mode=${run%% *} gargs=${run#* }
      ntenv=() gshared=0 gsys=$sys
      if [[ $mode == mpi ]]; then
        ntenv=(MPI=1 NP=2)
        # Fewer GPUs than processes: they share GPU 0 under MPS, where the
        # stock NCCL refuses to run (ncclgo only), as the capi step does.
        if ((NGPUS < 2)); then
          gshared=1 gsys=none
          ntenv+=(NCCL_TESTS_DEVICE=0 CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log")
          mps_start || res="$res; MPS did not start"
        fi
      fi
      rm -f "$SRC"/all_reduce_perf_*.log "$SRC"/all_reduce_ncclgo.log "$SRC"/all_reduce_nccl.log
      bt graph/nccl-tests-$mode 240 env TESTS=all_reduce ARGS="-b 8 -e 8 -n 100 -w 5 -G 100 -c 1 $gargs" SYSTEM_NCCL_LIB="$gsys" "${ntenv[@]}" \
        bash capi/test/nccl-tests.sh "$SRC" bundle; rc=$?
      ((gshared)) && mps_stop
      for lib in ncclgo nccl; do
        [[ -f $SRC/all_reduce_$lib.log ]] || continue
        cp "$SRC/all_reduce_$lib.log" "$L/graph/nccl-tests-$mode-$lib.log"
        # nccl-tests' 8-byte row: out-of-place time in column 6, #wrong in column 9.
        row=$(awk '$1 == 8 && NF >= 9 {print "time " $6 " us, #wrong " $9; exit}' "$SRC/all_reduce_$lib.log")
        res="$res; nccl-tests -G 100 ($mode $gargs) on $lib: ${row:-no row}"
        [[ $lib == ncclgo && $row != *"#wrong 0" ]] && st=FAIL
      done
      ((rc)) && st=FAIL
    done
  fi
  if [[ -x ${TORCH_VENV:-/opt/torch/.venv}/bin/python ]]; then
    tnp=${GRAPH_TORCH_NPROC:-2} tenv=()
    if ((NGPUS < tnp)); then
      mps_start || res="$res; MPS did not start"
      tenv=(CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log")
    fi
    bt graph/torch 180 env "${tenv[@]}" STEPS=graph LIBS=ncclgo NPROC=$tnp OUT="$L/graph/torch" BUDGET=160 bash tests/torch/run.sh; rc=$?
    ((NGPUS < tnp)) && mps_stop
    grep -hE "TORCH-CHECKS|GRAPH-TIME|MISMATCH" "$L/graph/torch/"*.log 2>/dev/null | head -10
    res="$res; torch.cuda.graph: $(grep -hE '^TORCH-CHECKS' "$L/graph/torch/"*.log 2>/dev/null | head -1 | cut -d' ' -f2-3) $(grep -hoE 'us_per_collective=[0-9.]+' "$L/graph/torch/"*.log 2>/dev/null | head -2 | tr '\n' ' ')(rc=$rc)"
    ((rc)) && st=FAIL
  else
    res="$res; torch: skipped (no ${TORCH_VENV:-/opt/torch/.venv})"
  fi
  done_ graph $st "$res"
fi

if has hang && begin hang && { ((NGPUS >= 2)) || { done_ hang SKIP "needs 2 GPUs, found $NGPUS"; false; }; }; then
  # The two-GPU first-collective hang (docs/notes/20261130-hang-2gpu.md). slim's kernel set,
  # and for the test the full set (or, without one, the set the hang note names).
  mkdir -p "$L/hang"
  bt hang/slimbuild 180 $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache \
    --only "${SLIM_ONLY:-AllReduce Sum (f32|bf16) * *}" --out build/slim.fatbin; tail -1 "$L/hang/slimbuild.log"
  UNEVEN_FATBIN=$NCCLGO_FATBIN
  if [[ ! -s $UNEVEN_FATBIN ]]; then
    UNEVEN_FATBIN=$ROOT/build/hang.fatbin
    bt hang/unevenbuild 180 $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache \
      --only "(AllReduce|ReduceScatter) Sum (f32|bf16|i32) * *" --out "$UNEVEN_FATBIN"; tail -1 "$L/hang/unevenbuild.log"
  fi
  if [[ ! -s build/slim.fatbin || ! -s $UNEVEN_FATBIN ]]; then
    done_ hang FAIL "no kernel set (build/slim.fatbin, $UNEVEN_FATBIN): see hang/slimbuild.log"
  else
    HANG_TO=${HANG_TO:-20} UNEVEN_TO=${UNEVEN_TO:-60} UNEVEN_WAIT=${UNEVEN_WAIT:-20s}
    SLIM=("$ROOT/$B/slim" -fatbin "$ROOT/build/slim.fatbin" -devices 0,1)
    UNEVEN=(NCCLGO_FATBIN="$UNEVEN_FATBIN" NCCLGO_TEST_WAIT="$UNEVEN_WAIT" "$T/tests.test" -test.v -test.count=1
            -test.run 'TestGroupedUnevenPlacement' -test.timeout $((UNEVEN_TO - 5))s)
    # hang_loop NAME N TO DIR CMD...: N runs of CMD (in DIR, with HANG_ENV and the
    # variant's VENV), each under timeout -s QUIT TO (a Go program dumps its
    # goroutines). Keeps the logs of failures (all of them when KEEP=1), prints
    # the first HANG_SHOW (2) failures' HANG/STUCK lines and goroutine 1, stops
    # after HANG_MAX_FAIL (5) failures or when the budget runs low. Sets OK, BAD, HUNG.
    hang_loop() {
      local name=$1 n=$2 to=$3 dir=$4 i rc f; shift 4
      OK=0 BAD=0 HUNG=0
      for i in $(seq 1 "$n"); do
        if (($(left) < to + 25)); then echo "$name: stopped after $((i - 1)) runs: VERIFY_BUDGET"; break; fi
        f=$L/hang/$name-$i.log
        # shellcheck disable=SC2086 # HANG_ENV and VENV are lists of NAME=VALUE words
        bt -C "$dir" "hang/$name-$i" "$to" env ${HANG_ENV:-} $VENV "$@" > /dev/null
        rc=$?
        if ((rc == 0)); then
          OK=$((OK + 1)); ((KEEP)) || rm -f "$f"
          continue
        fi
        BAD=$((BAD + 1))
        # Hung: killed at the limit, or the test's own wait saw a group hang.
        if ((rc == 124 || rc == 131 || rc == 137)) || grep -qE '^(HANG|STUCK)' "$f"; then HUNG=$((HUNG + 1)); fi
        echo "$name run $i FAILED (rc=$rc)"
        if ((BAD <= ${HANG_SHOW:-2})); then
          grep -E -A12 '^(HANG|STUCK)' "$f" | head -40
          grep -E '^(--- FAIL|slim:|panic)' "$f" | head -4
          grep -A25 '^goroutine 1 \[' "$f" | head -30
        fi
        ((BAD >= ${HANG_MAX_FAIL:-5})) && { echo "$name: stopped after $BAD failures"; break; }
      done
      echo "$name: $OK passed, $BAD failed ($HUNG hung)"
    }
    # e1_split LOG: "same" when every rank logged the same choices
    # (NCCL_DEBUG_SUBSYS=COLL: "<coll> <n> bytes: ALGO/PROTO channels C threads T"), else each rank's.
    e1_split() {
      sed -nE 's/.*\[([0-9]+)\] NCCL INFO (.* bytes: .*)/\1\t\2/p' "$1" | sort -u |
        awk -F'\t' '{ sig[$1] = sig[$1] $2 "; " }
          END { n = 0; for (r in sig) if (!(sig[r] in seen)) { seen[sig[r]] = 1; n++ }
                if (n == 0) print "none"; else if (n == 1) print "same"; else { for (r in sig) printf "[%s] %s", r, sig[r]; print "" } }'
    }
    for v in ${HANG_VARIANTS:-plain}; do
      KEEP=0
      case $v in
        plain) VENV="" ;;
        e1) VENV="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL"; KEEP=1 ;;
        e2) VENV="NCCL_PROTO=SIMPLE" ;;
        e2ring) VENV="NCCL_ALGO=RING" ;;
        *) echo "hang: unknown variant $v (plain, e1, e2, e2ring)"; continue ;;
      esac
      STEP_S=$SECONDS
      echo "-- hang:$v: ${HANG_ENV:-} $VENV"
      hang_loop "slim-$v" "${HANG_RUNS:-30}" "$HANG_TO" "$ROOT" "${SLIM[@]}"
      sok=$OK sbad=$BAD shung=$HUNG
      hang_loop "uneven-$v" "${UNEVEN_RUNS:-6}" "$UNEVEN_TO" "$ROOT/tests" "${UNEVEN[@]}"
      uok=$OK ubad=$BAD uhung=$HUNG
      more=""
      subs=$(cat "$L"/hang/uneven-"$v"-*.log 2>/dev/null | grep -o -- '--- FAIL: TestGroupedUnevenPlacement/[^ ]*' | sed 's/--- FAIL: TestGroupedUnevenPlacement\///' | sort | uniq -c | awk '{printf "%s%s×%s", sep, $2, $1; sep=" "}')
      [[ -n $subs ]] && more="; failed subtests: $subs"
      if [[ $v == e1 ]]; then
        # E1: under H1 every hung run shows the ranks' choices split, every completed one the same.
        hs=0 hsame=0 cs=0 csame=0 nolines=0
        for f in "$L"/hang/slim-e1-*.log; do
          [[ -e $f ]] || continue
          s=$(e1_split "$f"); i=${f##*-}; i=${i%.log}
          hung=0; grep -q '^TIMEOUT' "$f" && hung=1
          what="done"; ((hung)) && what="hung"
          echo "slim-e1 run $i: ${what}, choices: $s" >> "$L/hang/e1-slim.txt"
          if [[ $s == none ]]; then nolines=$((nolines + 1))
          elif [[ $s == same ]]; then ((hung)) && hsame=$((hsame + 1)) || csame=$((csame + 1))
          else ((hung)) && hs=$((hs + 1)) || cs=$((cs + 1)); fi
        done
        ntopo=$(cat "$L"/hang/*-e1-*.log 2>/dev/null | grep -c "view of the topology differs")
        { grep -m1 ': done' "$L/hang/e1-slim.txt"; grep -m3 ': hung' "$L/hang/e1-slim.txt"; } 2>/dev/null
        more="$more; E1 slim choices split: $hs hung/$cs completed, same: $hsame hung/$csame completed$( ((nolines)) && echo ", no COLL lines in $nolines runs"); 'topology differs' warnings: $ntopo"
      fi
      st=PASS; ((sbad + ubad)) && st=FAIL; ((sok + sbad + uok + ubad == 0)) && st=SKIP
      done_ "hang:$v" $st "slim $sok/$((sok + sbad)) passed ($shung hung), uneven $uok/$((uok + ubad)) passed ($uhung hung)${HANG_ENV:+; HANG_ENV=$HANG_ENV}${VENV:+; $VENV}$more"
    done
    # One run of each with the choices logged, kept for the record.
    STEP_S=$SECONDS
    DBG=(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS="${HANG_SUBSYS:-INIT,ENV,TUNING,COLL}")
    # shellcheck disable=SC2086
    bt hang/record-slim "$HANG_TO" env ${HANG_ENV:-} "${DBG[@]}" "${SLIM[@]}"; r1=$?
    # shellcheck disable=SC2086
    bt -C tests hang/record-uneven "$UNEVEN_TO" env ${HANG_ENV:-} "${DBG[@]}" "${UNEVEN[@]}"; r2=$?
    done_ hang:record INFO "NCCL_DEBUG=INFO ${DBG[1]}: slim rc=$r1, uneven rc=$r2 (hang/record-*.log)"
  fi
fi

if has mp && begin mp; then
  # The multi-process matrix (docs/MULTIPROCESS.md): each case is one
  # tests.test run; it passes when the test does and, where given, the
  # children's logs show the transport expected.
  mkdir -p "$L/mp"
  SHORT=-test.short MPTO=${MP_TO:-150}
  [[ ${MP_FULL:-0} == 1 ]] && { SHORT=""; MPTO=${MP_TO:-540}; }
  CASES=${MP_CASES:-p2p shm ipc 2x2 refused kill mps2 mps4 mpsipc mpsshm mpswin mpsvmm mpsstress mpsleak}
  res="" nbad=0
  # mp_case NAME WANT RUN ENV...: WANT: a "via ..." the logs must show ("" none).
  mp_case() {
    local name=$1 want=$2 run=$3 rc f=$L/mp/$1.log via; shift 3
    bt -C tests "mp/$name" "$MPTO" env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P "$@" \
      "$T/tests.test" -test.run "$run" -test.v -test.count=1 $SHORT -test.timeout $(($(lim "$MPTO") > 10 ? $(lim "$MPTO") - 5 : 5))s
    rc=$?
    grep -E 'MPRESULT|MPREFUSED|MPLOST|MPREBUILT|MPSSTRESS|STRESS MPS|LEAK|survivor|killed rank|^--- |^(ok|FAIL|PASS)$' "$f" | sed -E 's/pid=[0-9]+/pid=N/; s/^ +//' | sort | uniq -c | sort -rn | head -8
    via=$(grep -oE 'via [A-Za-z0-9]+/[A-Za-z0-9/]+' "$f" | sort | uniq -c | awk '{printf "%s%s×%s", sep, $3, $1; sep=","}')
    # A test that skipped (no kernel image, say) checked nothing: not ok.
    if gook "mp/$name" $rc && grep -q -- '^--- PASS' "$f" && [[ -z $want || $(grep -c "$want" "$f") -gt 0 ]]; then
      res="$res $name:ok${via:+($via)}"
    else
      nbad=$((nbad + 1)); res="$res $name:FAIL(rc=$rc${want:+, want $want}${via:+, saw $via})"
      grep -E -B2 -A10 -- '--- FAIL|panic' "$f" | head -30
    fi
  }
  mpsc() { [[ " $CASES " == *" $1 "* ]]; }
  if ((NGPUS >= 2)); then
    mpsc p2p && mp_case p2p "via P2P/CUMEM" '^TestMultiProcess$' NCCLGO_TEST_DEVICES=0,1
    mpsc shm && mp_case shm "via SHM" '^TestMultiProcess$' NCCLGO_TEST_DEVICES=0,1 NCCL_P2P_DISABLE=1
    mpsc ipc && mp_case ipc "via P2P/IPC" '^TestMultiProcess$' NCCLGO_TEST_DEVICES=0,1 NCCL_CUMEM_ENABLE=0
    mpsc 2x2 && mp_case 2x2 "" '^TestMultiProcess$' NCCLGO_TEST_DEVICES=0,1 NCCLGO_MP_RANKS_PER_PROC=2
    mpsc kill && mp_case kill "" '^TestMultiProcessKill$' NCCLGO_TEST_DEVICES=0,1
  else
    res="$res (p2p shm ipc 2x2 kill over 2 GPUs: skipped, $NGPUS GPU)"
  fi
  mpsc refused && mp_case refused "" '^TestMultiProcessSharedGPURefused$' NCCLGO_TEST_DEVICES=0
  if mpsc mps2 || mpsc mps4 || mpsc mpsipc || mpsc mpsshm || mpsc mpswin || mpsc mpsvmm || mpsc mpsstress || mpsc mpsleak || { mpsc kill && ((NGPUS < 2)); }; then
    if ! command -v nvidia-cuda-mps-control > /dev/null; then
      res="$res mps:SKIP(no nvidia-cuda-mps-control)"
    else
      # Stopped by mps_stop below and, whatever happens, by the EXIT trap.
      if mps_start; then
        MPSENV=(CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log" NCCLGO_TEST_DEVICES=0)
        mpsc mps2 && mp_case mps2 "" '^TestMultiProcess$' "${MPSENV[@]}" NCCLGO_MP_NPROCS=2
        mpsc mps4 && mp_case mps4 "" '^TestMultiProcess$' "${MPSENV[@]}" NCCLGO_MP_NPROCS=4
        # The other transports between 2 processes on the one GPU: legacy IPC and SHM.
        mpsc mpsipc && mp_case mpsipc "via P2P/IPC" '^TestMultiProcess$' "${MPSENV[@]}" NCCLGO_MP_NPROCS=2 NCCL_CUMEM_ENABLE=0
        mpsc mpsshm && mp_case mpsshm "via SHM" '^TestMultiProcess$' "${MPSENV[@]}" NCCLGO_MP_NPROCS=2 NCCL_P2P_DISABLE=1
        # DIRECT across the processes on registered windows (NCCLGO_MP_WINDOWS), forced.
        mpsc mpswin && mp_case mpswin "direct=true" '^TestMultiProcess$' "${MPSENV[@]}" NCCLGO_MP_NPROCS=2 NCCLGO_MP_WINDOWS=1 NCCL_ALGO=direct
        # The same on VMM buffers (ncclMemAlloc's kind), exported as POSIX descriptors.
        mpsc mpsvmm && mp_case mpsvmm "direct=true" '^TestMultiProcess$' "${MPSENV[@]}" NCCLGO_MP_NPROCS=2 NCCLGO_MP_WINDOWS=vmm NCCL_ALGO=direct
        mpsc kill && ((NGPUS < 2)) && mp_case kill-mps "" '^TestMultiProcessKill$' "${MPSENV[@]}"
        # Issue 14 across processes: 2 and 4 processes × 8 ranks, 64 MiB AllReduces at once.
        mpsc mpsstress && mp_case mpsstress2 "" '^TestStressMPS$' "${MPSENV[@]}" NCCLGO_MP_NPROCS=2
        mpsc mpsstress && mp_case mpsstress4 "" '^TestStressMPS$' "${MPSENV[@]}" NCCLGO_MP_NPROCS=4
        # Issue 13: the leak test's InitRank cycles in 2 processes sharing GPU 0.
        mpsc mpsleak && mp_case mpsleak "" '^TestLeakGPUMultiProcess$' "${MPSENV[@]}"
      else
        nbad=$((nbad + 1)); res="$res mps:FAIL(nvidia-cuda-mps-control -d failed)"
      fi
      mps_stop
    fi
  fi
  ((nbad)) && done_ mp FAIL "${SHORT:-full}:$res" || done_ mp PASS "${SHORT:-full}:$res"
fi

if has hosts && begin hosts; then
  # Issue 24 over fake hosts (docs/MULTIPROCESS.md, "Fake hosts"): the
  # processes of one block share an NCCL_HOSTID, all run on HOSTS_DEVICES
  # (GPU 0) under MPS; NET (TCP over HOSTS_IFNAME, lo) joins the hosts, P2P
  # or SHM the ranks of one host. Three parts:
  #  1. the matrix: TestMultiProcess -test.short with NCCLGO_MP_HOSTS in
  #     HOSTS_LIST (2 3 4; empty: no matrix) × ranks per host HOSTS_RPH (1 2) × HOSTS_COMBOS
  #     (NCCL_ALGO/NCCL_PROTO forced; "LL128" is NCCL_PROTO=LL128 with RING
  #     at one rank per host and TREE at two: the collectives must all be
  #     refused with ErrNoChoice, LL128 being off across NET; PAT only at
  #     one rank per host, and it skips where the build has no PAT); each
  #     run a short case list (NCCLGO_MP_CASES: the collectives the
  #     algorithm applies to, and Send/Recv, in two of the four short types,
  #     rotated), HOSTS_JOBS (1: see MPS below) runs at a time, counts HOSTS_COUNTS ("1|1001|65539"). Two ranks per host are two
  #     processes, but at 3 hosts one process with two ranks, and at 4 hosts
  #     SHM (NCCL_P2P_DISABLE=1) joins them;
  #     then uneven layouts (HOSTS_UNEVEN "3:2 5:3 2,1:2 1,2,1:2 2,1:1":
  #     processes:hosts, or ranks of each process:hosts; RING and TREE ×
  #     LL and SIMPLE);
  #  2. the kill test over HOSTS_KILL ("2x1 2x2": hosts x ranks per host),
  #     alone: the survivors must fail within 10 s naming the lost rank;
  #  3. nccl-tests all_reduce, all_gather, reduce_scatter (-c 1) on
  #     libnccl.so.2 under mpirun, each process its own fake host
  #     (capi/test/hostid.sh), for HOSTS_NT_NP ("2 4") processes on GPU 0
  #     (with a GPU per process: each its own, and the machine's NCCL beside),
  #     HOSTS_NT_ARGS (-b 8 -e 16M -f 8 -g 1 -c 1); needs MPI and
  #     third_party/nccl-tests (skipped, saying so, without).
  # On one H200: about 3-10 s per matrix run (33 runs, 1 at a time), 20 s
  # per kill run, 30-60 s of nccl-tests (plus 1-2 min to build them with
  # MPI when no earlier step did).
  mkdir -p "$L/hosts"
  hres="" hbad=0
  if ! command -v nvidia-cuda-mps-control > /dev/null; then
    done_ hosts SKIP "no nvidia-cuda-mps-control (the fake hosts share GPU 0 under MPS)"
  elif ! mps_start; then
    done_ hosts FAIL "nvidia-cuda-mps-control -d failed"
  else
    HENV=(CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log"
      NCCLGO_TEST_DEVICES="${HOSTS_DEVICES:-0}" NCCL_SOCKET_IFNAME="${HOSTS_IFNAME:-lo}")
    # HOSTS_JOBS (1): matrix runs at a time. All of them are clients of ONE
    # MPS server on one GPU, and under MPS a client's fatal GPU fault (an
    # illegal address, or a client killed mid-kernel) is delivered to every
    # client of the server: each running run then fails with
    # CUDA_ERROR_ILLEGAL_ADDRESS wherever it happens to be, and until they
    # have all exited the server refuses new clients with
    # CUDA_ERROR_MPS_SERVER_NOT_READY. With more than one at a time a
    # single faulting run takes its neighbours down and the logs cannot say
    # which one faulted; one at a time, the faulting run is the one that
    # failed, and the MPS server is restarted after it (below).
    HTO=${HOSTS_TO:-90} HJOBS=${HOSTS_JOBS:-1}
    types=(Uint8 Int32 Float32 Bfloat16)
    HP=() HN=() hi=0 hnot=""
    # hosts_wait N: until fewer than N of the matrix's runs are running.
    hosts_wait() {
      local p n
      while :; do
        n=0; for p in "${HP[@]}"; do kill -0 "$p" 2> /dev/null && n=$((n + 1)); done
        ((n < $1)) && return; sleep 0.2
      done
    }
    # hosts_run NAME ENV...: one TestMultiProcess run, log and rc in $L/hosts/.
    hosts_run() {
      local name=$1 to; shift
      to=$(lim "$HTO")
      printf '%q ' "$@" > "$L/hosts/$name.log"; echo "  # timeout ${to}s" >> "$L/hosts/$name.log"
      (cd tests && exec timeout -s QUIT -k 10 "$to" env "$@" "$T/tests.test" -test.run '^TestMultiProcess$' -test.v -test.count=1 \
        -test.short -test.timeout $((to > 10 ? to - 5 : 5))s) >> "$L/hosts/$name.log" 2>&1
      echo $? > "$L/hosts/$name.rc"
    }
    # hosts_mps_why LOG: why a run's CUDA calls failed because of MPS, or
    # nothing: a fault delivered by the server, or a server not accepting
    # clients (an earlier client faulted and not every client has exited).
    hosts_mps_why() {
      if grep -q 'CUDA_ERROR_MPS_' "$1"; then
        echo "$(grep -m1 -oE 'CUDA_ERROR_MPS_[A-Z_]+' "$1"): the MPS server refused this run, most likely because an earlier run's client faulted (CUDA_ERROR_ILLEGAL_ADDRESS in the first failing log) and its clients had not all exited; not a missing driver"
      elif grep -q 'CUDA_ERROR_ILLEGAL_ADDRESS' "$1"; then
        echo "CUDA_ERROR_ILLEGAL_ADDRESS: this run's or, with HOSTS_JOBS>1, a concurrent run's client faulted (under MPS every client gets the fault)"
      fi
    }
    for h in ${HOSTS_LIST-2 3 4}; do
      for rph in ${HOSTS_RPH:-1 2}; do
        if ((rph == 1)); then place=(NCCLGO_MP_NPROCS=$h NCCLGO_MP_RANKS_PER_PROC=1)
        elif ((h == 3)); then place=(NCCLGO_MP_NPROCS=$h NCCLGO_MP_RANKS_PER_PROC=$rph)
        else place=(NCCLGO_MP_NPROCS=$((h * rph)) NCCLGO_MP_RANKS_PER_PROC=1); fi
        shm=(); ((h == 4 && rph > 1)) && shm=(NCCL_P2P_DISABLE=1)
        for ap in ${HOSTS_COMBOS:-RING/LL RING/SIMPLE TREE/LL TREE/SIMPLE PAT/SIMPLE LL128}; do
          if [[ $ap == LL128 ]]; then ap=RING/LL128; ((rph > 1)) && ap=TREE/LL128; fi
          algo=${ap%/*} proto=${ap#*/}
          [[ $algo == PAT ]] && ((rph > 1)) && continue
          t1=${types[hi % 4]} t2=${types[(hi + 1) % 4]}; hi=$((hi + 1))
          case $algo in
            TREE) colls="AllReduce (Sum|Min|Max)|SendRecv ring" ;;
            PAT) colls="AllGather|ReduceScatter Sum" ;;
            *) colls="AllReduce Sum|AllGather|ReduceScatter Sum|Broadcast|SendRecv ring" ;;
          esac
          name=h${h}r${rph}-$algo-$proto
          if (($(left) < 45)); then hnot="$hnot $name"; continue; fi
          hosts_wait "$HJOBS"
          # After a fault the server refuses clients until all of the old
          # ones are gone: restart it (one run at a time: nothing else runs).
          if ((HJOBS == 1)) && ((${#HN[@]} > 0)) && [[ -n $(hosts_mps_why "$L/hosts/${HN[-1]}.log") ]]; then
            echo "  ${HN[-1]}: $(hosts_mps_why "$L/hosts/${HN[-1]}.log" | cut -c1-60)...; restarting MPS"
            mps_stop; mps_start || { hnot="$hnot $name(MPS restart failed)"; continue; }
          fi
          hosts_run "$name" "${HENV[@]}" "${place[@]}" "${shm[@]}" NCCLGO_MP_HOSTS="$h" NCCL_ALGO="$algo" NCCL_PROTO="$proto" \
            NCCLGO_MP_CASES="^($colls) ($t1|$t2) count=(${HOSTS_COUNTS:-1|1001|65539})\$" &
          HP+=($!) HN+=("$name")
        done
      done
    done
    # Uneven layouts, HOSTS_UNEVEN ("3:2 5:3 2,1:2 1,2,1:2 2,1:1"):
    # PROCS:HOSTS, one rank per process, consecutive processes per host
    # as hostOf splits them (2+1, 2+2+1), or RANKS,RANKS,...:HOSTS, the
    # ranks of each process (2,1 on 2 hosts: a process of two ranks beside
    # a process of one; on 1 host, the real one): every collective of
    # setup and every tuning decision must be the same on ranks that see
    # different neighbourhoods. RING and TREE, LL and SIMPLE.
    for ul in ${HOSTS_UNEVEN-3:2 5:3 2,1:2 1,2,1:2 2,1:1}; do
      np=${ul%:*} h=${ul#*:}
      if [[ $np == *,* ]]; then place=(NCCLGO_MP_RANKS_PER_PROC="$np")
      else place=(NCCLGO_MP_NPROCS="$np" NCCLGO_MP_RANKS_PER_PROC=1); fi
      for ap in ${HOSTS_UNEVEN_COMBOS:-RING/LL RING/SIMPLE TREE/LL TREE/SIMPLE}; do
        algo=${ap%/*} proto=${ap#*/}
        t1=${types[hi % 4]} t2=${types[(hi + 1) % 4]}; hi=$((hi + 1))
        case $algo in
          TREE) colls="AllReduce (Sum|Min|Max)|SendRecv ring" ;;
          *) colls="AllReduce Sum|AllGather|ReduceScatter Sum|Broadcast|SendRecv ring" ;;
        esac
        name=u${np//,/-}on${h}-$algo-$proto
        if (($(left) < 45)); then hnot="$hnot $name"; continue; fi
        hosts_wait "$HJOBS"
        if ((HJOBS == 1)) && ((${#HN[@]} > 0)) && [[ -n $(hosts_mps_why "$L/hosts/${HN[-1]}.log") ]]; then
          echo "  ${HN[-1]}: $(hosts_mps_why "$L/hosts/${HN[-1]}.log" | cut -c1-60)...; restarting MPS"
          mps_stop; mps_start || { hnot="$hnot $name(MPS restart failed)"; continue; }
        fi
        hosts_run "$name" "${HENV[@]}" "${place[@]}" NCCLGO_MP_HOSTS="$h" NCCL_ALGO="$algo" NCCL_PROTO="$proto" \
          NCCLGO_MP_CASES="^($colls) ($t1|$t2) count=(${HOSTS_COUNTS:-1|1001|65539})\$" &
        HP+=($!) HN+=("$name")
      done
    done
    # The NET layer through an NCCL net plugin (issue 24 item 3): the test
    # plugin (runtime/net/testdata/sockplugin.c, TCP on loopback) built
    # here with cc, 2 hosts, RING/SIMPLE and RING/LL; the connections
    # between hosts must report the plugin's name, not NET/Socket.
    if [[ ${HOSTS_PLUGIN:-1} == 1 ]] && command -v cc > /dev/null && (($(left) >= 45)); then
      plug=$ROOT/build/libnccl-net-ngsock.so
      if cc -shared -fPIC -O1 -Wall -I runtime/net -o "$plug" runtime/net/testdata/sockplugin.c > "$L/hosts/plugin-build.log" 2>&1; then
        for ap in RING/SIMPLE RING/LL; do
          hosts_wait "$HJOBS"
          name=h2r1-plugin-${ap%/*}-${ap#*/}
          hosts_run "$name" "${HENV[@]}" NCCLGO_MP_NPROCS=2 NCCLGO_MP_RANKS_PER_PROC=1 NCCLGO_MP_HOSTS=2 NCCL_NET_PLUGIN="$plug" \
            NCCL_ALGO="${ap%/*}" NCCL_PROTO="${ap#*/}" NCCLGO_MP_CASES="^(AllReduce Sum|AllGather|SendRecv ring) (Int32|Float32) count=(1|1001|65539)\$" &
          HP+=($!) HN+=("$name")
        done
      else
        hnot="$hnot plugin(cc failed: $(head -c 120 "$L/hosts/plugin-build.log"))"
      fi
    fi
    hosts_wait 1
    for name in "${HN[@]}"; do
      [[ $name == *plugin* ]] || continue
      if ! grep -q 'via=NET/TestSock' "$L/hosts/$name.log"; then
        echo "  $name: the connections between hosts did not go through the plugin"; echo 1 > "$L/hosts/$name.rc"
      fi
    done
    nok=0 nskip=0 nfail=0 nll128=0 skipwhy=""
    for name in "${HN[@]}"; do
      f=$L/hosts/$name.log rc=$(cat "$L/hosts/$name.rc" 2> /dev/null || echo 125)
      line=$(grep -m1 -oE 'MPHOSTS .*' "$f") mpswhy=$(hosts_mps_why "$f")
      if [[ -n $mpswhy ]]; then
        # A CUDA error from MPS is a failure, even where the test skipped
        # for "no CUDA driver" (cuInit refused by a server not ready).
        nfail=$((nfail + 1)); hres="$hres $name:FAIL(rc=$rc, MPS)"
        echo "  $name FAIL rc=$rc $mpswhy"; grep -m3 -E 'CUDA_ERROR_|HANG' "$f" | cut -c1-300
      elif ((rc == 0)) && grep -q -- '--- SKIP: TestMultiProcess (' "$f"; then
        nskip=$((nskip + 1)); why=$(grep -B1 -- '--- SKIP: TestMultiProcess (' "$f" | head -1 | sed -E 's/^ +[a-z_]+\.go:[0-9]+: //')
        echo "  $name SKIP $why"; skipwhy=${why:0:90}
      elif gook "hosts/$name" "$rc"; then
        nok=$((nok + 1)); [[ $line == *"LL128 forced"* ]] && nll128=$((nll128 + 1))
        echo "  $name ok ${line#MPHOSTS }"
      else
        nfail=$((nfail + 1)); hres="$hres $name:FAIL(rc=$rc)"
        echo "  $name FAIL rc=$rc"; grep -E -B2 -A8 -- '--- FAIL|panic|Error:' "$f" | head -24
      fi
    done
    hres="matrix ${#HN[@]} runs: $nok ok, $nfail FAIL, $nskip skipped${skipwhy:+ ($skipwhy)}; LL128 forced refused in $nll128${hnot:+; not run (budget):$hnot}${hres:+; failed:$hres}"
    ((nfail)) && hbad=1
    [[ -n $hnot ]] && hbad=1
    # 2. A fake host killed mid-AllReduce. Each on a fresh MPS server: one
    # that a matrix run left faulted refuses clients, and killing a client
    # mid-kernel may itself fault the server's other clients (the
    # survivors), so the server is not reused after it either.
    for kp in ${HOSTS_KILL-2x1 2x2}; do
      h=${kp%x*} rph=${kp#*x}
      mps_stop; mps_start || { hres="$hres; kill $kp: FAIL(MPS restart failed)"; hbad=1; continue; }
      bt -C tests "hosts/kill-$kp" 120 env "${HENV[@]}" NCCLGO_MP_HOSTS="$h" NCCLGO_MP_NPROCS=$((h * rph)) \
        "$T/tests.test" -test.run '^TestMultiProcessKill$' -test.v -test.count=1 -test.short -test.timeout 110s
      rc=$?
      k=$(grep -m1 -oE 'slowest survivor noticed after [^ ]+' "$L/hosts/kill-$kp.log" | awk '{print $NF}')
      grep -E 'survivor|MPKILL|killed rank' "$L/hosts/kill-$kp.log" | head -6
      mpswhy=$(hosts_mps_why "$L/hosts/kill-$kp.log")
      [[ -n $mpswhy ]] && echo "  kill-$kp: $mpswhy (a killed MPS client may fault the others: see the survivors' errors)"
      if gook "hosts/kill-$kp" $rc; then hres="$hres; kill $kp: ok (${k:-?})"; else hres="$hres; kill $kp: FAIL(rc=$rc${k:+, $k})"; hbad=1; fi
    done
    # 3. nccl-tests over mpirun, each process its own fake host.
    mps_stop; mps_start || hres="$hres; nccl-tests: MPS restart failed"
    SRC=${NCCL_TESTS_SRC:-third_party/nccl-tests}
    if [[ ! -f $SRC/src/common.cu ]]; then
      hres="$hres; nccl-tests: skipped (no $SRC/src/common.cu: carry third_party/nccl-tests)"
    elif ! command -v mpirun > /dev/null || ! command -v mpicc > /dev/null; then
      hres="$hres; nccl-tests: skipped (no mpirun/mpicc)"
    else
      nts="tests: ${HOSTS_NT_TESTS:-all_reduce all_gather reduce_scatter}"
      for np_ in ${HOSTS_NT_NP-2 4}; do
        rm -f "$SRC"/*_ncclgo.log "$SRC"/*_nccl.log
        # A GPU per process: beside the machine's NCCL over its socket
        # transport; else all on GPU 0 under MPS, ncclgo alone.
        ntdev=(NCCL_TESTS_DEVICE=0 SYSTEM_NCCL_LIB=none)
        ((NGPUS >= np_)) && [[ -n $NCCL_LIB ]] && ntdev=(SYSTEM_NCCL_LIB="$(dirname "$(readlink -f "$NCCL_LIB")")")
        bt "hosts/nccl-tests-np$np_" "${HOSTS_NT_TO:-240}" env MPI=1 NP="$np_" HOSTS="$np_" "${ntdev[@]}" \
          TESTS="${HOSTS_NT_TESTS:-all_reduce all_gather reduce_scatter}" BIN_LIST="${HOSTS_NT_TESTS:-all_reduce all_gather reduce_scatter}" \
          ARGS="${HOSTS_NT_ARGS:--b 8 -e 16M -f 8 -g 1 -c 1}" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT \
          CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log" NCCL_SOCKET_IFNAME="${HOSTS_IFNAME:-lo}" \
          bash capi/test/nccl-tests.sh "$SRC" bundle
        rc=$? good=0 all=0 net=0
        for t in ${HOSTS_NT_TESTS:-all_reduce all_gather reduce_scatter}; do
          all=$((all + 1)); f=$SRC/${t}_ncclgo.log
          [[ -f $f ]] || continue
          cp "$f" "$L/hosts/nccl-tests-np$np_-$t.log"
          [[ -f $SRC/${t}_nccl.log ]] && cp "$SRC/${t}_nccl.log" "$L/hosts/nccl-tests-np$np_-$t-nccl.log"
          grep -q 'Out of bounds values : 0 OK' "$f" && good=$((good + 1))
          net=$((net + $(grep -c 'via NET' "$f")))
        done
        grep -E "^== |Out of bounds|Avg bus|FAILED" "$L/hosts/nccl-tests-np$np_.log" | head -12
        hres="$hres; nccl-tests np$np_ ($np_ hosts): $good/$all with 0 wrong, $net NET connections logged (rc=$rc)"
        ((rc || good < all || net == 0)) && hbad=1
      done
    fi
    mps_stop
    ((hbad)) && done_ hosts FAIL "$hres" || done_ hosts PASS "$hres"
  fi
fi

if has stress && begin stress; then
  res="" st=PASS
  shapes=${STRESS_SHAPES:-${NCCLGO_STRESS_SHAPES:-}}
  for place in 0 $( ((NGPUS >= 2)) && echo 0,1); do
    name=stress-${place/,/-}
    bt -C tests "$name" "${STRESS_TO:-200}" env NCCLGO_TEST_DEVICES=$place ${shapes:+"NCCLGO_STRESS_SHAPES=$shapes"} \
      ${STRESS_BUDGET:+NCCLGO_STRESS_BUDGET=$STRESS_BUDGET} NCCLGO_TEST_WAIT=${STRESS_WAIT:-30s} \
      "$T/tests.test" -test.run '^(TestStress|TestStressSplit|TestStressTwoFullComms|TestDestroyBounded)$' -test.v -test.count=1 \
      -test.timeout $(($(lim "${STRESS_TO:-200}") > 10 ? $(lim "${STRESS_TO:-200}") - 5 : 5))s
    rc=$?
    grep -E 'STRESS|Destroy after|^--- |^(ok|FAIL|PASS)$|HANG' "$L/$name.log" | head -20
    gook "$name" $rc || st=FAIL
    res="$res devices $place: $(gocount "$name") (rc=$rc);"
  done
  done_ stress $st "${shapes:+shapes $shapes; }$res"
fi

if has capi && begin capi; then
  mkdir -p "$L/capi"
  bt capi/capi_test 90 $B/capi_test gpu; rc=$?
  tail -5 "$L/capi/capi_test.log"
  res="capi_test gpu rc=$rc"; st=PASS; ((rc)) && st=FAIL
  SRC=${NCCL_TESTS_SRC:-third_party/nccl-tests}
  if [[ ! -f $SRC/src/common.cu ]]; then
    res="$res; nccl-tests: skipped (no $SRC/src/common.cu: carry third_party/nccl-tests)"
  elif ((NGPUS < 2)) && [[ -z ${NT_ARGS:-} ]]; then
    res="$res; nccl-tests: skipped (-g 2 needs 2 GPUs, found $NGPUS; set NT_ARGS)"
  else
    rm -f "$SRC"/*_ncclgo.log "$SRC"/*_nccl.log
    sys=none; [[ -n $NCCL_LIB ]] && sys=$(dirname "$(readlink -f "$NCCL_LIB")")
    # NT_MPI=1: nccl-tests built with MPI, NT_NP (2) processes of one rank
    # each under mpirun; with fewer GPUs than processes they share GPU 0
    # under MPS (the stock NCCL refuses that, so only ncclgo runs).
    ntenv=() shared=0
    if [[ ${NT_MPI:-0} == 1 ]]; then
      ntenv=(MPI=1 NP="${NT_NP:-2}")
      if ((NGPUS < ${NT_NP:-2})); then
        shared=1 sys=none
        ntenv+=(NCCL_TESTS_DEVICE=0 CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log")
        mps_start || res="$res; MPS did not start"
      fi
    fi
    bt capi/nccl-tests "${NT_TO:-480}" env TESTS="${NT_TESTS:-all_reduce all_gather reduce_scatter broadcast reduce sendrecv alltoall gather scatter}" \
      ARGS="${NT_ARGS:--b 8 -e 1G -f 4 -g 2 -c 1}" SYSTEM_NCCL_LIB="$sys" "${ntenv[@]}" bash capi/test/nccl-tests.sh "$SRC" bundle
    rc=$?
    ((shared)) && mps_stop
    cp "$SRC"/*_ncclgo.log "$SRC"/*_nccl.log "$SRC/build.log" "$L/capi/" 2>/dev/null
    grep -E "^== |Out of bounds|Avg bus|FAILED|rror" "$L/capi/nccl-tests.log" | head -60
    # Per library: the tests whose run printed "Out of bounds values : 0 OK".
    nt=$(awk '/^== [a-z_]+_perf on /{ if (cur != "") r[cur] = st; cur = $2 " " $4; st = "FAIL"; next }
              /Out of bounds values : 0 OK/{ if (cur != "") st = "ok" }
              END { if (cur != "") r[cur] = st
                    for (k in r) { split(k, a, " "); n[a[2]]++; if (r[k] == "ok") g[a[2]]++; else bad[a[2]] = bad[a[2]] " " a[1] }
                    for (l in n) printf "%s %s %d/%d ok%s;", sep, l, g[l], n[l], (bad[l] ? " (failed:" bad[l] ")" : ""); }' "$L/capi/nccl-tests.log")
    mode="threads"
    [[ ${NT_MPI:-0} == 1 ]] && mode="MPI, ${NT_NP:-2} processes"
    ((shared)) && mode="$mode sharing GPU 0 under MPS"
    res="$res; nccl-tests ($mode, ${NT_ARGS:--b 8 -e 1G -f 4 -g 2 -c 1}) rc=$rc:${nt:- no test ran}"
    ((rc)) && st=FAIL
  fi
  done_ capi $st "$res"
fi

if has torch && begin torch; then
  # TORCH_NPROCS (default: TORCH_NPROC, else "2 3 4"): one run of
  # tests/torch/run.sh per process count. Where processes outnumber the
  # GPUs they share them under MPS (TORCH_MPS=0 skips those counts instead)
  # and only ncclgo runs: the stock NCCL refuses ranks that share a GPU, so
  # there is no stock loss to compare with (fsdp.py compares DDP and FSDP2
  # with one-process references of their own).
  tres="" tfail=0
  nps=(${TORCH_NPROCS:-${TORCH_NPROC:-2 3 4}})
  left_n=${#nps[@]}
  for np_ in "${nps[@]}"; do
    tenv=() steps=${TORCH_STEPS:-probe collectives split extra extra-eager ddp fsdp nojoin compare}
    if ((NGPUS < np_)); then
      if [[ ${TORCH_MPS:-1} != 1 ]]; then tres+=" np$np_:SKIP(TORCH_MPS=0)"; left_n=$((left_n - 1)); continue; fi
      if ! mps_start; then tres+=" np$np_:FAIL(MPS did not start)"; tfail=1; left_n=$((left_n - 1)); continue; fi
      tenv=(LIBS=ncclgo CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log")
      steps=${steps// compare/}
    fi
    # An equal share of what is left for each remaining count.
    tl=$(( ($(left) - 15) / left_n )); left_n=$((left_n - 1))
    ((tl < 60)) && tl=60
    bt torch/run-np$np_ "$tl" env STEPS="$steps" OUT="$L/torch/np$np_" BUDGET=$((tl > 40 ? tl - 20 : 20)) \
      NPROC="$np_" METHOD=${TORCH_METHOD:-preload} ${TORCH_HOSTS:+HOSTS=$TORCH_HOSTS} "${tenv[@]}" bash tests/torch/run.sh
    rc=$?
    mps_stop
    sed -n '/^== summary/,$p' "$L/torch/run-np$np_.log"
    r=$(grep -m1 '^TORCH-RUN-RESULT' "$L/torch/run-np$np_.log")
    if [[ $r == "TORCH-RUN-RESULT OK"* ]] && ((rc == 0)); then tres+=" np$np_:PASS"; else tres+=" np$np_:FAIL(rc=$rc)"; tfail=1; fi
  done
  ((tfail)) && done_ torch FAIL "${tres# }" || done_ torch PASS "${tres# }"
fi

if has np && begin np; then
  mkdir -p "$L/np"
  if ((NGPUS < 2)); then
    done_ np SKIP "-np 2 puts one process on each GPU; 2 processes on one GPU need MPS (found $NGPUS GPU)"
  else
    res="" st=PASS
    for coll in ${NP_COLLS:-allreduce allgather}; do
      bt "np/$coll" 150 $B/ncclperf -np 2 -coll "$coll" -b 8 -e "${NP_E:-128M}" -f 4 -c 1 ${NCCL_LIB:+-compare "$NCCL_LIB"}
      rc=$?
      f=$L/np/$coll.log
      grep -E '^# (ncclgo|reference|measured|[0-9]+ processes)|Out of bounds|Avg bus|rror' "$f" | head -8
      nok=$(grep -c 'Out of bounds values : 0 OK' "$f")
      if ((rc == 0 && nok > 0)) && ! grep -q 'FAILED' "$f"; then res="$res $coll:ok"; else res="$res $coll:FAIL(rc=$rc)"; st=FAIL; tail -5 "$f"; fi
    done
    # The kill test: rank 1 SIGKILLed mid-sweep; the launcher must exit
    # non-zero within NP_KILL_LIMIT s, naming the lost rank, with no rank left.
    f=$L/np/kill.log
    timeout -s KILL "$(lim 120)" $B/ncclperf -np 2 ${NP_KILL_ARGS:--coll allreduce -b 8 -e 8 -n 100000000 -w 10 -c 0} > "$f" 2>&1 &
    tp=$!
    for i in $(seq 1 60); do grep -q '^# ncclperf:' "$f" && break; sleep 1; done
    sleep "${NP_KILL_DELAY:-3}"
    launcher=$(children $tp); ranks=$(for p in $launcher; do children "$p"; done); victim=""
    for p in $ranks; do tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx 'NCCLGO_LAUNCH_RANK=1' && victim=$p; done
    if [[ -z $victim ]]; then
      echo "np kill: no rank 1 process found (launcher ${launcher:-none}, ranks ${ranks:-none})"
      kill "$tp" 2>/dev/null; wait "$tp"
      res="$res kill:FAIL(no rank 1 process)"; st=FAIL
    else
      kill -9 "$victim"; k=$SECONDS
      wait "$tp"; rc=$?; took=$((SECONDS - k))
      # Left: a rank process still there and not a zombie.
      sleep 1; alive=""
      for p in $ranks; do [[ -e /proc/$p && $(sed -E 's/.*\) ([A-Za-z]) .*/\1/' "/proc/$p/stat" 2>/dev/null) != Z ]] && alive="$alive $p"; done
      tail -4 "$f"
      echo "np kill: rank 1 (pid $victim) killed; launcher rc=$rc after ${took}s; ranks left:${alive:- none}"
      if ((rc != 0 && rc != 137 && took <= ${NP_KILL_LIMIT:-20})) && [[ -z $alive ]] && grep -qE 'rank 1 .*exited before the job finished|rank 1 \(pid' "$f"; then
        res="$res kill:ok(${took}s)"
      else
        res="$res kill:FAIL(rc=$rc after ${took}s${alive:+, left:$alive})"; st=FAIL
        for p in $alive; do kill -9 "$p" 2>/dev/null; done
      fi
    fi
    done_ np $st "${NCCL_LIB:+-compare $NCCL_LIB:}$res"
  fi
fi

if has slim && begin slim; then
  # Issue 16: the example module's slim set (its filter read from its
  # go:generate line), run by the example binary (embedded when the bundle's
  # slim embeds a set, else from the file) and by the standard ncclperf; the
  # set comes back as $OUT/slim.fatbin, for embedding here.
  mkdir -p "$L/slim"
  filter=$(sed -n 's|^//go:generate .* --only "\([^"]*\)".*|\1|p' examples/slim/main.go)
  bt slim/build 180 $B/ncclgen build --arch sm_90 -j "$JOBS" --nvcc "$NVCC" --cache build/cache --only "$filter" --out build/slim.fatbin
  rc=$?; tail -2 "$L/slim/build.log"; st=PASS; res="filter \"$filter\": build rc=$rc"
  ((rc)) && st=FAIL
  cp build/slim.fatbin "$OUT/slim.fatbin" 2>/dev/null
  $B/ncclgen inspect build/slim.fatbin > "$L/slim/inspect.txt" 2>&1; head -12 "$L/slim/inspect.txt"
  # slim_ok NAME: AllReduce f32 and bf16 correct, AllGather refused naming the function and the filter.
  slim_ok() { grep -q 'AllReduce Sum f32: .* correct' "$L/slim/$1.log" && grep -q 'AllReduce Sum bf16: .* correct' "$L/slim/$1.log" \
    && grep '^AllGather: ' "$L/slim/$1.log" | grep -E 'AllGather [A-Z]+ [A-Z0-9]+ is not in this kernel set' | grep -qF "(built with filter \"$filter\")"; }
  for devs in 0,0 0,0,0 $( ((NGPUS >= 2)) && echo 0,1); do
    for how in embedded file; do
      name=$how-${devs//,/-}
      if [[ $how == embedded ]]; then bt "slim/$name" 60 $B/slim -devices "$devs"
      else bt "slim/$name" 60 $B/slim -fatbin build/slim.fatbin -devices "$devs"; fi
      rc=$?; cat "$L/slim/$name.log" | tail -4
      if [[ $how == embedded ]] && grep -q 'embeds no kernel set' "$L/slim/$name.log"; then res="$res; $name: no embedded set"; continue; fi
      slim_ok "$name" && res="$res; $name: ok" || { st=FAIL; res="$res; $name: FAIL rc=$rc"; }
    done
  done
  # The set's types, one sweep each, every size checked.
  for ty in float bfloat16; do
    bt slim/perf-allreduce-$ty 120 $B/ncclperf -fatbin build/slim.fatbin -coll allreduce -d $ty -g 2 -b 8 -e 64M -f 8 -n 5 -w 2 -c 1
    rc=$?; grep -E '^ +[0-9]|wrong|Out of bounds|rror' "$L/slim/perf-allreduce-$ty.log" | head -12
    nbad=$(grep -cE 'Out of bounds values : [1-9]' "$L/slim/perf-allreduce-$ty.log")
    ((rc == 0 && nbad == 0)) && res="$res; ncclperf allreduce $ty: ok" || { st=FAIL; res="$res; ncclperf allreduce $ty rc=$rc wrong=$nbad"; }
  done
  bt slim/perf-allgather 60 $B/ncclperf -fatbin build/slim.fatbin -coll allgather -g 2 -b 1M -e 1M -c 1
  rc=$?; tail -3 "$L/slim/perf-allgather.log"
  if ((rc != 0)) && grep -qF "is not in this kernel set (built with filter \"$filter\")" "$L/slim/perf-allgather.log"; then
    res="$res; ncclperf allgather: refused naming it"
  else st=FAIL; res="$res; ncclperf allgather rc=$rc, no clear refusal"; fi
  done_ slim $st "$res"
fi


if has shared && begin shared; then
  mkdir -p "$L/shared"
  # cliffs FILE: 0 wrong, then every busbw (out of place) from the first row
  # on at least 90 % of the row before; prints "ok LAST" or "FAIL why".
  cliffs() {
    awk '/^ +[0-9]/ { n++; b = $8 + 0; if ($9 != "0" && $9 != "N/A") { print "FAIL wrong " $9 " at " $1; bad = 1; exit }
                      if (n > 1 && b < 0.9 * prev) { print "FAIL cliff at " $1 " B: " b " after " prev; bad = 1; exit }
                      prev = b; last = $1 ":" b }
         END { if (!bad) { if (n == 0) print "FAIL no rows"; else print "ok " last } }' "$1"
  }
  SW=(-b "${SHARED_B:-1M}" -e "${SHARED_E:-1G}" -f "${SHARED_F:-2}" -c 1 -n "${SHARED_N:-20}")
  res="" st=PASS
  sweep() { # NAME ENV... -- ARGS...
    local name=$1; shift; local envs=(); while [[ $1 != -- ]]; do envs+=("$1"); shift; done; shift
    bt "shared/$name" 150 env ${envs[@]+"${envs[@]}"} $B/ncclperf "$@" "${SW[@]}"
    local rc=$? v; v=$(cliffs "$L/shared/$name.log")
    ((rc != 0)) && v="FAIL rc=$rc"
    echo "shared $name: $v"
    [[ $v == ok* ]] || st=FAIL
    res="$res $name:${v// /=}"
  }
  for c in allreduce allgather reducescatter broadcast sendrecv; do sweep "g2-$c" -- -g 2 -coll $c; done
  sweep g4-allreduce -- -g 4
  sweep g8-allreduce -- -g 8
  if command -v nvidia-cuda-mps-control > /dev/null && mps_start; then
    M=(CUDA_MPS_PIPE_DIRECTORY="$MPS_DIR/pipe" CUDA_MPS_LOG_DIRECTORY="$MPS_DIR/log")
    sweep np2-allreduce "${M[@]}" -- -np 2
    for c in allreduce allgather reducescatter sendrecv; do sweep "np2-R2-$c" "${M[@]}" -- -np 2 -R 2 -coll $c; done
    sweep np2-R2-allreduce-50pct "${M[@]}" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50 -- -np 2 -R 2
    sweep np4-R2-allreduce-25pct "${M[@]}" CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 -- -np 4 -R 2
    mps_stop
  else
    res="$res mps:SKIP(no MPS)"
  fi
  done_ shared $st "$res"
fi

if has split && begin split; then
  bt split 240 "$T/ncclgo.test" -test.run 'Split|Shrink' -test.v -test.count=1 -test.timeout $(($(lim 240) > 10 ? $(lim 240) - 5 : 5))s
  rc=$?
  grep -E '^--- |^(ok|FAIL|PASS)$|panic' "$L/split.log" | head -30
  gook split $rc && done_ split PASS "$(gocount split)" || done_ split FAIL "rc=$rc: $(gocount split)"
fi

if has random && begin random; then
  res="" st=PASS rb=$(secs "${RANDOM_BUDGET:-40s}")
  for place in $( ((NGPUS >= 2)) && echo 0,1) 0; do
    name=random-${place/,/-}
    bt -C tests "$name" $((rb + 40)) env NCCLGO_TEST_DEVICES=$place NCCLGO_RANDOM_BUDGET="${RANDOM_BUDGET:-40s}" NCCLGO_TEST_WAIT=20s \
      "$T/tests.test" -test.v -test.count=1 -test.run 'TestRandom$' -test.timeout $((rb + 35))s
    rc=$?
    grep -E 'random:|^--- |elements wrong|HANG|seed' "$L/$name.log" | head -8
    gook "$name" $rc || st=FAIL
    res="$res devices $place: rc=$rc $(grep -m1 -oE 'random: .*' "$L/$name.log" | cut -c1-100);"
  done
  done_ random $st "budget ${RANDOM_BUDGET:-40s} each:$res"
fi

if has multigpu-tests && begin multigpu-tests; then
  nvidia-smi topo -m > "$L/topo.txt" 2>&1
  echo "== suite over $NGPUS GPUs (NCCLGO_TEST_DEVICES=$DEVS NCCLGO_TEST_RANKS=${MG_RANKS:-$NGPUS})"
  MGT=$(lim "${MG_TEST_TIMEOUT:-330}")
  (cd tests && NCCLGO_TEST_DEVICES=$DEVS NCCLGO_TEST_RANKS=${MG_RANKS:-$NGPUS} NCCLGO_TEST_LARGE=${NCCLGO_TEST_LARGE:-0} \
    t timeout "$MGT" "$ROOT/bundle/tests/tests.test" -test.v -test.short -test.count=1 -test.timeout=${MGT}s ${TESTFLAGS:-} \
    > "$L/multigpu-tests.log" 2>&1)
  rc1=$?
  grep -E '^(--- FAIL|FAIL|ok|PASS|panic)|^    --- (PASS|FAIL)|checks|elapsed' "$L/multigpu-tests.log" | tail -${TAIL:-40}
  echo "== runtime TestGPUSeveralGPUs"
  (t timeout "$(lim 120)" "$ROOT/bundle/tests/ncclgo.test" -test.v -test.run 'TestGPUSeveralGPUs' -test.count=1 \
    > "$L/multigpu-runtime.log" 2>&1)
  rc2=$?
  grep -E -- '--- (PASS|FAIL|SKIP)|^(FAIL|ok|PASS|panic)|InitAll|elapsed' "$L/multigpu-runtime.log" | tail -${TAIL:-40}
  d="suite rc=$rc1 ($(gocount multigpu-tests)), TestGPUSeveralGPUs rc=$rc2; devices $DEVS, ranks ${MG_RANKS:-$NGPUS}"
  gook multigpu-tests $rc1 && gook multigpu-runtime $rc2 && done_ multigpu-tests PASS "$d" || done_ multigpu-tests FAIL "$d"
fi

if has multigpu-perf && begin multigpu-perf; then
  [[ -e "$L/topo.txt" ]] || nvidia-smi topo -m > "$L/topo.txt" 2>&1
  echo "== ncclperf over $NGPUS GPUs, reference ${NCCL_LIB:-none} (NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE)"
  for coll in allreduce allgather reducescatter broadcast; do
    cmd="$B/ncclperf -coll $coll -b 8 -e ${MG_MAX:-8G} -f ${MG_F:-2} -g $NGPUS -n ${MG_N:-50} -w ${MG_W:-10} ${NCCL_LIB:+-compare $NCCL_LIB}"
    echo "# command: NCCL_NVLS_ENABLE=0 NCCLGO_FATBIN=build/ncclgo.fatbin $cmd" > "$L/$coll.txt"
    t timeout "$(lim "${MG_PERF_TIMEOUT:-120}")" $cmd >> "$L/$coll.txt" 2>&1 || tail -3 "$L/$coll.txt"
    grep -E '^# (ncclgo|reference):' "$L/$coll.txt" | head -2
    # Acceptance: the ratio (column NF-1; > 1: ncclgo better) is >= 1 at
    # every size (busbw from 64 KiB, time below).
    awk -v coll=$coll '$1 ~ /^[0-9]+$/ && NF > 14 { n++; if ($(NF-1) + 0 < 1) { bad++; worst = worst sprintf(" %s:%s", $1, $(NF-1)) } }
      END { printf "%-14s %d sizes, %d below NCCL%s\n", coll, n, bad, (bad ? ":" worst : "") }' "$L/$coll.txt" | tee -a "$L/multigpu-perf.txt"
  done
  done_ multigpu-perf INFO "$(awk '{printf "%s%s %s/%s below NCCL", sep, $1, $4, $2; sep="; "}' "$L/multigpu-perf.txt") (tables: <coll>.txt)"
fi

if has calibrate && begin calibrate; then
  SRC=${NCCL_TESTS_SRC:-third_party/nccl-tests}
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
  CAL_G=${CAL_G:-2}
  NH=$ROOT/build/nccl-home NT=$ROOT/build/nccl-tests
  # Raw outputs go to $CAL, in logs.tgz.
  CAL=$L/calibrate
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
    t timeout $(lim 300) make -C "$SRC/src" -j "$JOBS" MPI=0 NCCL_HOME="$NH" CUDA_HOME="$CUDA_HOME" NVCC="$NVCC" \
      NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$NT" $targets > "$CAL/nccl-tests-build.log" 2>&1 \
      || tail -20 "$CAL/nccl-tests-build.log"
    tail -1 "$CAL/nccl-tests-build.log"
  fi
  if [[ -n "$NCCL_LIB" && -f "$SRC/src/common.cu" && ! -x "$NT/broadcast_perf" ]]; then
    echo "calibrate: skipped: nccl-tests did not build (log in calibrate/nccl-tests-build.log)"
  elif [[ -n "$NCCL_LIB" && -f "$SRC/src/common.cu" ]]; then
    cal_start=$(date +%s)
    export LD_LIBRARY_PATH="$NH/lib:$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    { echo "# $CAL_ARGS${PIN:+ under $PIN}"; env | grep -E '^(NCCL|CUDA|GO)[A-Z_]*=' | sort; nproc; lscpu 2>/dev/null | head -25
      nvidia-smi topo -m 2>&1; nvidia-smi -q -d CLOCK,PERFORMANCE 2>&1 | head -60; } > "$CAL/machine.txt"
    # ncclperf runs ncclgo's sweep first when a fatbin is there (the column as -compare
    # normally measures it, after ncclgo's communicators are gone), else NCCL alone.
    GO=""
    [[ "${CAL_NCCLGO:-1}" == 0 || ! -f "$NCCLGO_FATBIN" ]] && GO="-ncclgo=false"
    # CAL_LOOP=0 leaves out ncclloop (built here with cc; the CUDA runtime it loads: CUDART).
    LOOP="" CUDART=${CUDART:-$(ls "$CUDA_HOME"/lib64/libcudart.so* 2>/dev/null | head -1)}
    if [[ ${CAL_LOOP:-1} != 0 && -n $CUDART ]] && cc -O2 -o "$CAL/ncclloop" tests/calib/ncclloop.c -ldl > "$CAL/ncclloop-build.log" 2>&1; then
      LOOP=$CAL/ncclloop
    fi
    : > "$L/calibrate.txt"
    # CAL_BISECT=1: tests/calib/bisect.sh's harness variants first (BISECT_* knobs), into
    # calibrate.txt; CAL_ROUNDS=0 then leaves out the usual rounds.
    if [[ ${CAL_BISECT:-0} == 1 && -x $LOOP ]]; then
      NT=$NT LOOP=$LOOP NP=$B/ncclperf NCCL_LIB=$lib CUDART=$CUDART OUTDIR=$CAL/bisect NCCLGO_FATBIN=$NCCLGO_FATBIN \
        t timeout $(lim 400) bash tests/calib/bisect.sh 2>&1 | tee -a "$L/calibrate.txt"
    fi
    # CAL_LIBS: the libraries both harnesses time, in turn: nccl (NCCL_LIB) and ncclgo
    # (bundle/libnccl.so.2, ncclgo's C ABI: nccl-tests links it by LD_LIBRARY_PATH,
    # ncclperf's column loads it with dlopen). Each one's raw outputs: calibrate/LIB/.
    CALD=$CAL NCCL_LP=$LD_LIBRARY_PATH
    for libsel in ${CAL_LIBS:-nccl}; do
      CAL=$CALD/$libsel && mkdir -p "$CAL"
      case $libsel in
        nccl) CLIB=$NCCL_LIB lib=$(readlink -f "$NCCL_LIB") SUF="" LD_LIBRARY_PATH=$NCCL_LP GOSEL=$GO ;;
        ncclgo) CLIB=$ROOT/bundle/libnccl.so.2 lib=$ROOT/bundle/libnccl.so.2 SUF=/ncclgo LD_LIBRARY_PATH=$ROOT/bundle:$NCCL_LP GOSEL=-ncclgo=false ;;
        *) echo "calibrate: CAL_LIBS: unknown library $libsel (want nccl or ncclgo)"; continue ;;
      esac
      if [[ ! -f $CLIB ]]; then echo "calibrate: $libsel: no $CLIB"; continue; fi
      echo "# calibrate $libsel: $CAL_ARGS -N ${CAL_CYCLES:-5}, $([[ -n ${CAL_RANGES:-} ]] && echo "sweeps MIN:MAX:ROUNDS $CAL_RANGES" || echo "${CAL_ROUNDS:-3} rounds") (nccl-tests first in odd rounds, ncclperf first in even ones; judged on ${CAL_STAT:-bestproc})${PIN:+, both under $PIN}; library $lib" >> "$L/calibrate.txt"
      for coll in $( ((${CAL_ROUNDS:-3} > 0)) && echo allreduce allgather reducescatter broadcast); do
        case $coll in allreduce) nt=all_reduce;; allgather) nt=all_gather;; reducescatter) nt=reduce_scatter;; broadcast) nt=broadcast;; esac
        # CAL_RANGES: "MIN:MAX:ROUNDS ..." sweeps, each its own processes (rounds numbered on
        # across them); default one sweep, CAL_B to CAL_E, CAL_ROUNDS rounds. Small sizes want
        # more processes than large ones (see the header).
        r=0
        for rg in ${CAL_RANGES:-${CAL_B:-8}:${CAL_E:-1G}:${CAL_ROUNDS:-3}}; do
          IFS=: read -r rb re rn <<< "$rg"
          RARGS="-b $rb -e $re -f ${CAL_F:-2} -g $CAL_G -n ${CAL_N:-200} -w ${CAL_W:-20} -c 0 -N ${CAL_CYCLES:-5}"
          for _ in $(seq 1 "$rn"); do
            r=$((r + 1))
            ntcmd=(timeout $(lim 120) $PIN "$NT/${nt}_perf" $RARGS)
            # shellcheck disable=SC2206
            npcmd=(timeout $(lim 180) env ${CAL_NP_ENV:-} $PIN $B/ncclperf -coll $coll $RARGS -compare "$CLIB" $GOSEL -hosttime)
            for who in $( ((r % 2)) && echo "nt np" || echo "np nt"); do
              f="$CAL/$coll-$who-$r.txt"
              if [[ $who == nt ]]; then t "${ntcmd[@]}" > "$f" 2>&1 || tail -3 "$f"
              else t "${npcmd[@]}" > "$f" 2>&1 || tail -3 "$f"; fi
            done
            # ncclloop (tests/calib): nccl-tests' loop in C with NCCL loaded by dlopen, as ncclperf loads it.
            if [[ -x $LOOP ]]; then
              t timeout $(lim 120) $PIN "$LOOP" -l "$lib" -r "$CUDART" -c $coll -b ${CAL_B:-8} -e ${CAL_LOOP_E:-4M} -g $CAL_G \
                -n ${CAL_N:-200} -w ${CAL_W:-20} > "$CAL/$coll-nc-$r.txt" 2>&1 || tail -3 "$CAL/$coll-nc-$r.txt"
            fi
          done
        done
        # nccl-tests' own host time per iteration up to ${CAL_HOST_E:-4M} (-C 1: the issue loop
        # before the drain, what ncclperf's -hosttime prints).
        t timeout $(lim 60) $PIN "$NT/${nt}_perf" ${CAL_ARGS/-e ${CAL_E:-1G}/-e ${CAL_HOST_E:-4M}} -C 1 > "$CAL/$coll-ntcpu.txt" 2>&1 || tail -3 "$CAL/$coll-ntcpu.txt"
        grep -hE '^# (ncclgo|reference|measured):' "$CAL/$coll-np-1.txt" | head -2
        # Per size (rows joined by the size column; nccl-tests' 0-byte rows of no-ops, where a
        # rank's chunk rounds to nothing, left out): the median over rounds of each harness's
        # out-of-place time (column 6 of nccl-tests and of ncclperf alone; with ncclgo, NCCL's is
        # column 14 and ncclgo's 6), their ratio, each harness's spread over rounds (max / min)
        # and each one's host time per iteration (the issue loop alone: ncclperf -hosttime,
        # nccl-tests -C 1).
        awk -v coll=$coll$SUF -v st=${CAL_STAT:-bestproc} -f tests/calib/compare.awk "$CAL"/$coll-nt-*.txt "$CAL"/$coll-np-*.txt "$CAL/$coll-ntcpu.txt" | tee -a "$L/calibrate.txt"
        if [[ -n $LOOP ]]; then
          # Per size: the median out-of-place time of nccl-tests, ncclloop and ncclperf's NCCL
          # column, and ncclloop's host time: ncclloop near nccl-tests puts a gap in ncclperf's
          # process, near ncclperf in loading NCCL with dlopen.
          awk -v coll=$coll$SUF '
            function med(s,   n, a, i, j, v) {
              n = split(s, a, " "); if (n == 0) return -1
              for (i = 2; i <= n; i++) { v = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > v; j--) a[j + 1] = a[j]; a[j + 1] = v }
              return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
            }
            FNR == 1 { kind = FILENAME ~ /-nt-[0-9]+\.txt$/ ? "nt" : FILENAME ~ /-nc-[0-9]+\.txt$/ ? "nc" : "np" }
            $1 ~ /^[0-9]+$/ && $1 > 0 && kind == "nc" && NF == 7 { nc[$1 + 0] = nc[$1 + 0] " " $6; host[$1 + 0] = host[$1 + 0] " " $7; next }
            $1 ~ /^[0-9]+$/ && $1 > 0 && kind == "nt" && NF >= 13 { nt[$1 + 0] = nt[$1 + 0] " " $6; next }
            $1 ~ /^[0-9]+$/ && $1 > 0 && kind == "np" && NF >= 13 { np[$1 + 0] = np[$1 + 0] " " (NF >= 17 ? $14 : $6) }
            END {
              printf "# %s-loop: median out-of-place time (us): nccl-tests, ncclloop (C, NCCL by dlopen), ncclperf-NCCL; loop/nt and np/loop\n", coll
              printf "#%11s %11s %9s %14s %8s %8s %10s\n", "size(B)", "nccl-tests", "ncclloop", "ncclperf-NCCL", "loop/nt", "np/loop", "loop-host"
              for (s in nc) sz[++n] = s + 0
              for (i = 2; i <= n; i++) { v = sz[i]; for (j = i - 1; j >= 1 && sz[j] > v; j--) sz[j + 1] = sz[j]; sz[j + 1] = v }
              for (k = 1; k <= n; k++) {
                s = sz[k]; a = med(nt[s]); b = med(nc[s]); c = med(np[s])
                printf "%12d %11.2f %9.2f %14.2f %8.3f %8.3f %10.2f\n", s, a, b, c, (a > 0 ? b / a : 0), (b > 0 ? c / b : 0), med(host[s])
              }
            }' "$CAL"/$coll-nt-*.txt "$CAL"/$coll-nc-*.txt "$CAL"/$coll-np-*.txt | tee -a "$L/calibrate.txt"
        fi
      done
    done
    CAL=$CALD LD_LIBRARY_PATH=$NCCL_LP
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
      echo "# NCCL's choices and arguments (NCCL_DEBUG=INFO, INIT,ENV,TUNING,COLL; $DIAG_ARGS): unique lines that differ" >> "$L/calibrate.txt"
      for coll in allreduce allgather reducescatter broadcast; do
        case $coll in allreduce) nt=all_reduce;; allgather) nt=all_gather;; reducescatter) nt=reduce_scatter;; broadcast) nt=broadcast;; esac
        # NCCL_DEBUG_FILE is line-buffered; NCCL's stdout would lose its tail when Go exits.
        export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING,COLL
        NCCL_DEBUG_FILE="$CAL/diag-$coll-nt.log" timeout $(lim 60) $PIN "$NT/${nt}_perf" $DIAG_ARGS > "$CAL/diag-$coll-nt.txt" 2>&1
        NCCL_DEBUG_FILE="$CAL/diag-$coll-np.log" timeout $(lim 60) $PIN $B/ncclperf -coll $coll $DIAG_ARGS -compare "$NCCL_LIB" -ncclgo=false > "$CAL/diag-$coll-np.txt" 2>&1
        unset NCCL_DEBUG NCCL_DEBUG_SUBSYS
        diff <(norm "$CAL/diag-$coll-nt.log") <(norm "$CAL/diag-$coll-np.log") > "$CAL/diag-$coll.diff"
        nd=$(grep -c '^[<>]' "$CAL/diag-$coll.diff")
        nt_algo=$(norm "$CAL/diag-$coll-nt.log" | grep -c 'Bytes -> Algo')
        echo "# $coll-diag: $nd differing lines (< nccl-tests, > ncclperf); $nt_algo algorithm choices seen" | tee -a "$L/calibrate.txt"
        grep '^[<>]' "$CAL/diag-$coll.diff" | head -${CAL_DIAG_LINES:-12} | sed 's/^/#   /' >> "$L/calibrate.txt"
      done
    fi
    echo "== calibration verdict ($(( $(date +%s) - cal_start )) s of runs; table in $L/calibrate.txt)"
    grep -E '^# (allreduce|allgather|reducescatter|broadcast)(/ncclgo)?[ -]' "$L/calibrate.txt"
  fi
  if [[ -s $L/calibrate.txt ]]; then
    done_ calibrate INFO "$(grep -E '^# (allreduce|allgather|reducescatter|broadcast)(/ncclgo)? ' "$L/calibrate.txt" | sed 's/^# *//' | tr -s ' ' | paste -sd';') (calibrate.txt)"
  else
    if [[ -z $NCCL_LIB ]]; then why="no NCCL library found (NCCL_LIB)"
    elif [[ ! -f $SRC/src/common.cu ]]; then why="no $SRC/src/common.cu (carry third_party/nccl-tests)"
    else why="nccl-tests did not build (calibrate/nccl-tests-build.log)"; fi
    done_ calibrate SKIP "$why"
  fi
fi

if has random-collect && begin random-collect; then
  while [[ ! -e $RBG/rc ]] && (($(left) > 25)); do sleep 5; done
  cp "$RBG/random.log" "$L/random-bg.log" 2>/dev/null
  grep -E 'random:|^--- |elements wrong|HANG|seed' "$L/random-bg.log" | head -8
  if [[ ! -e $RBG/rc ]]; then done_ random-collect FAIL "still running (no $RBG/rc): $(grep -m1 -oE 'random: .*' "$L/random-bg.log" | cut -c1-120)"
  else
    rc=$(sed 's/rc=//' "$RBG/rc")
    gook random-bg "$rc" && st=PASS || st=FAIL
    done_ random-collect $st "rc=$rc $(grep -m1 -oE 'random: .*' "$L/random-bg.log" | cut -c1-160)"
  fi
fi

n=$(find "$OUT" -mindepth 1 -maxdepth 1 | wc -l)
((n > 8)) && echo "# warning: $n entries in $OUT, more than the 8 a device call brings back" | tee -a "$SUMMARY"
echo
echo "######## summary ($((SECONDS - T0)) s; logs: $OUT/logs.tgz)"
sed -n '/^# gpu-verify/h; /^# gpu-verify/!H; ${x;p}' "$SUMMARY"
