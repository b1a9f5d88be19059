#!/usr/bin/env bash
# PyTorch on ncclgo's libnccl.so.2 against the machine's NCCL (issue 12).
#
# On the GPU machine, from the repository root, with the bundle (`make bundle`
# here) and the kernels built there:
#   bundle/bin/ncclgen build --arch sm_90 --out build/ncclgo.fatbin
#   bash tests/torch/run.sh
#
# For each library (the stock NCCL first, then ncclgo) it runs, under torchrun
# with NPROC processes (one GPU each, or sharing the GPUs round-robin when
# there are fewer, which ncclgo runs under MPS): collectives.py (exact checks), ddp.py
# (200 steps, losses to $OUT/loss-<lib>.json) and collectives.py --device-id
# (eager init: new_group through ncclCommSplit); then compare_loss.py
# (within 1e-5 relative). Issue 23 adds extra.py (every NCCL dtype,
# product/min, reduce, gather/scatter, all_gather lists, async work
# handles, object collectives, new_group of the even ranks, split_group
# with --device-id, destroy_process_group then re-init; step "extra"
# lazily, "extra-eager" with --device-id), fsdp.py (DDP against one
# process on the whole batch, FSDP2 fully_shard against DDP, within
# FSDP_RTOL=1e-6 over FSDP_STEPS=200 steps; step "fsdp") and nojoin.py (a
# rank exits without joining; the others must fail within the timeout
# with ncclgo's text, NOJOIN_TEXT; step "nojoin", required for ncclgo
# only) and latency.py (all_reduce per call, 8 B to 256 MiB, on torch's
# default stream; step "latency", LAT_ITERS calls per size, T_LAT). Step
# "graph" (issue 26, not in the default STEPS): graph.py, a
# torch.cuda.graph of collectives replayed in batches on changing inputs and
# checked exactly, and the time per replayed 8-byte all_reduce. Every step
# runs under `timeout`, and all steps
# together stay within BUDGET seconds (default 570: one device call).
#
# How ncclgo's library gets in: torch's libtorch_cuda.so needs libnccl.so.2
# and finds the one of its nvidia/nccl wheel through its RPATH/RUNPATH
# ($ORIGIN/../../nvidia/nccl/lib). LD_PRELOAD (METHOD=preload, the default)
# always wins: the preloaded object has the soname libnccl.so.2, so it
# satisfies that dependency and the wheel's copy is not loaded. LD_LIBRARY_PATH
# (METHOD=libpath) wins only over a RUNPATH, not over an old-style RPATH; the
# probe step shows what each method gives. torch.cuda.nccl.version() cannot
# tell which library is loaded (it is the version of the nccl.h torch was
# compiled against); the scripts ask the bound library itself (ncclinfo.py:
# ncclGetVersion found in libtorch_cuda's scope, its file by dladdr) and fail
# unless ncclgo's run reports EXPECT_VERSION (NCCL_MAJOR.MINOR.PATCH of
# $BUNDLE/include/nccl.h) from $BUNDLE/lib and the
# stock run does not use ncclgo's file.
#
# Environment: BUNDLE (bundle), NCCLGO_FATBIN (build/ncclgo.fatbin, else
# $BUNDLE/lib/ncclgo.fatbin), TORCH_VENV (/opt/torch/.venv), NPROC (2),
# METHOD (preload|libpath), HOSTS (fake hosts: 2..NPROC makes each block of
# consecutive ranks a host of its own NCCL_HOSTID, through
# capi/test/hostid.sh under torchrun --no-python, so that NET joins them;
# NCCL_SOCKET_IFNAME defaults to lo then), STEPS ("probe collectives split extra extra-eager ddp fsdp nojoin compare"),
# LIBS ("stock ncclgo"), OUT (build/torch), BUDGET (570), T_PROBE (60),
# T_COLL (200), T_DDP (200), EXPECT_VERSION (from nccl.h), STOCK_NCCL (the wheel's
# libnccl.so.2, found under the venv's site-packages/nvidia), SCRIPT_ARGS (more arguments for both
# scripts), COLL_ARGS (for collectives.py only, e.g. "--verbose"). A CPU dry
# run of the plumbing: STEPS="collectives ddp compare" SCRIPT_ARGS="--backend
# gloo" COLL_ARGS="--dtypes float32 --skip all_reduce/avg,all_gather_into,reduce_scatter".
#
# Prints each step's key lines (TORCH-CHECKS, DDP-TRAIN, LOSS-COMPARE,
# NCCL-PROBE, MISMATCH), the tail of its log when it fails, a table of steps
# and finally TORCH-RUN-RESULT OK|FAIL; exit status 1 on any failure.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
OUT=${OUT:-build/torch}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
BUNDLE=${BUNDLE:-bundle}
VENV=${TORCH_VENV:-/opt/torch/.venv}
PY=${PYTHON:-$VENV/bin/python}
TORCHRUN=${TORCHRUN:-$VENV/bin/torchrun}
NPROC=${NPROC:-2}
METHOD=${METHOD:-preload}
STEPS=${STEPS:-probe collectives split extra extra-eager ddp fsdp nojoin compare}
LIBS=${LIBS:-stock ncclgo}
HOSTS=${HOSTS:-}
BUDGET=${BUDGET:-570}
T_PROBE=${T_PROBE:-60}
T_COLL=${T_COLL:-200}
T_DDP=${T_DDP:-200}
# The version ncclgo's library claims: its own nccl.h says it.
hdr_version() { awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v ? "." : "") $3} END{print v}' "$1"; }
EXPECT_VERSION=${EXPECT_VERSION:-$( [[ -f $BUNDLE/include/nccl.h ]] && hdr_version "$BUNDLE/include/nccl.h")}
T_FSDP=${T_FSDP:-300}
T_NOJOIN=${T_NOJOIN:-120}
FSDP_STEPS=${FSDP_STEPS:-200}
FSDP_RTOL=${FSDP_RTOL:-1e-6}
NOJOIN_TEXT=${NOJOIN_TEXT:-exited without destroying the communicator}
T0=$SECONDS

die() { echo "run.sh: $*" >&2; echo "TORCH-RUN-RESULT FAIL (setup)"; exit 2; }

[[ -n $EXPECT_VERSION ]] || die "no $BUNDLE/include/nccl.h to take the expected version from (set EXPECT_VERSION)"
[[ -x $PY ]] || die "no python at $PY (set TORCH_VENV or PYTHON)"
[[ -x $TORCHRUN ]] || die "no torchrun at $TORCHRUN (set TORCH_VENV or TORCHRUN)"
[[ -f $BUNDLE/lib/libnccl.so.2 ]] || die "no $BUNDLE/lib/libnccl.so.2: run 'make bundle' on the build machine"
LIB=$(readlink -f "$BUNDLE/lib/libnccl.so.2")
FATBIN=${NCCLGO_FATBIN:-build/ncclgo.fatbin}
[[ -n ${NCCLGO_FATBIN:-} && ! -f $FATBIN ]] && die "NCCLGO_FATBIN=$FATBIN: no such file"
[[ -f $FATBIN ]] || FATBIN=$BUNDLE/lib/ncclgo.fatbin
[[ -f $FATBIN ]] || die "no kernels: build them with '$BUNDLE/bin/ncclgen build --arch sm_90 --out build/ncclgo.fatbin' or set NCCLGO_FATBIN"
FATBIN=$(readlink -f "$FATBIN")
# The wheel's library: nvidia/nccl/lib (or wherever the nvidia-nccl wheel of this CUDA put it).
STOCK=${STOCK_NCCL:-$(find "$VENV"/lib/python3*/site-packages/nvidia -name 'libnccl.so.2*' 2>/dev/null | sort | head -1)}
[[ -n $STOCK ]] && STOCK=$(readlink -f "$STOCK")

HOSTWRAP=()
if [[ -n $HOSTS ]]; then
  [[ $HOSTS =~ ^[0-9]+$ ]] && ((HOSTS >= 1 && HOSTS <= NPROC)) || die "HOSTS=$HOSTS: want a number of fake hosts, 1 to NPROC=$NPROC"
  export NCCLGO_FAKE_HOSTS=$HOSTS NCCLGO_HOSTID_PREFIX=${NCCLGO_HOSTID_PREFIX:-torch$$} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
  HOSTWRAP=(--no-python "$ROOT/capi/test/hostid.sh" "$PY")
fi

case $METHOD in
  preload) NCCLGO_ENV=(LD_PRELOAD="$LIB") ;;
  libpath) NCCLGO_ENV=(LD_LIBRARY_PATH="$(dirname "$LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}") ;;
  *) die "METHOD=$METHOD: want preload or libpath" ;;
esac
NCCLGO_ENV+=(NCCLGO_FATBIN="$FATBIN" NCCL_NVLS_ENABLE=0)
NCCLGO_EXPECT=(--expect-nccl-version "$EXPECT_VERSION" --expect-nccl-lib "$LIB")
STOCK_ENV=(NCCL_NVLS_ENABLE=0)
STOCK_EXPECT=(--forbid-nccl-lib "$LIB")
[[ -n $STOCK ]] && STOCK_EXPECT+=(--expect-nccl-lib "$STOCK")

echo "== setup"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1 | head -8
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(), "torch.cuda.nccl.version()", torch.cuda.nccl.version())' 2>&1 | tail -1
echo "ncclgo lib: $LIB"
echo "fatbin:     $FATBIN"
echo "stock lib:  ${STOCK:-not found in $VENV}"
echo "method:     $METHOD (${NCCLGO_ENV[0]})"
[[ -n $HOSTS ]] && echo "hosts:      $HOSTS fake hosts of $NPROC ranks (NCCL_HOSTID=$NCCLGO_HOSTID_PREFIX-host<k>, NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME)"
TORCH_CUDA=$(compgen -G "$VENV/lib/python3*/site-packages/torch/lib/libtorch_cuda.so" | head -1)
if [[ -n $TORCH_CUDA ]] && command -v readelf >/dev/null; then
  echo "libtorch_cuda.so: $(readelf -d "$TORCH_CUDA" | grep -E 'RPATH|RUNPATH|NEEDED.*nccl' | sed 's/.*(\(.*\))/\1/' | tr -s ' ' | paste -sd';')"
fi

declare -a TABLE=()
FAILED=0

# reap ID: kill what is left of a step (workers that outlived torchrun after
# a timeout): every process whose environment has NCCLGO_TORCH_STEP=ID.
reap() {
  local p n=0
  for p in /proc/[0-9]*; do
    if tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "NCCLGO_TORCH_STEP=$1"; then
      kill -9 "${p#/proc/}" 2>/dev/null && n=$((n + 1))
    fi
  done
  ((n)) && echo "reaped $n leftover process(es) of step $1"
}

# step NAME TIMEOUT REQUIRED CMD...: runs CMD under timeout, logs to $OUT/NAME.log.
step() {
  local name=$1 t=$2 required=$3
  shift 3
  local left=$((BUDGET - (SECONDS - T0)))
  if ((left < 15)); then
    TABLE+=("$(printf '%-22s %-8s' "$name" SKIPPED) (out of BUDGET=${BUDGET}s)")
    ((required)) && FAILED=$((FAILED + 1))
    return 1
  fi
  ((t > left)) && t=$left
  local log=$OUT/$name.log s=$SECONDS rc
  echo "== $name (timeout ${t}s)"
  printf '%q ' "$@" >"$log"
  echo >>"$log"
  timeout -k 15 "$t" env NCCLGO_TORCH_STEP="$name.$$" "$@" >>"$log" 2>&1
  rc=$?
  ((rc == 124 || rc == 137)) && echo "TIMEOUT: killed after ${t}s" | tee -a "$log"
  reap "$name.$$" | tee -a "$log"
  grep -E '^(TORCH-LAT|TORCH-CHECKS|TORCH-LIB|DDP-TRAIN|DDP-ERROR|LOSS-COMPARE|NCCL-PROBE|MISMATCH|WRONG|FSDP-COMPARE|FSDP-ERROR|NOJOIN|GRAPH-TIME)' "$log" | head -40
  local verdict=ok
  if ((rc != 0)); then
    verdict=FAIL
    ((required)) || verdict="fail (informational)"
    ((required)) && FAILED=$((FAILED + 1))
    echo "-- $name failed (rc=$rc); last lines of $log:"
    tail -25 "$log"
  fi
  TABLE+=("$(printf '%-22s %-8s rc=%-4s %4ss' "$name" "$verdict" "$rc" "$((SECONDS - s))")")
  return "$rc"
}

has() { [[ " $STEPS " == *" $1 "* ]]; }

# torch_cmd LIB SCRIPT ARGS...: sets CMD to torchrun with LIB's environment and expectations.
torch_cmd() {
  local lib=$1 script=$2
  shift 2
  if [[ $lib == ncclgo ]]; then
    CMD=(env -u LD_PRELOAD "${NCCLGO_ENV[@]}")
  else
    CMD=(env -u LD_PRELOAD "${STOCK_ENV[@]}")
  fi
  local extra=${SCRIPT_ARGS:-}
  [[ $script == collectives.py || $script == extra.py ]] && extra+=" ${COLL_ARGS:-}"
  [[ $script == nojoin.py ]] && extra=""
  # shellcheck disable=SC2206 # the extra arguments are split into words on purpose
  CMD+=("$TORCHRUN" --standalone --nproc_per_node "$NPROC" "${HOSTWRAP[@]}" "$ROOT/tests/torch/$script" "$@" $extra)
  [[ $script == nojoin.py ]] && return
  if [[ $lib == ncclgo ]]; then CMD+=("${NCCLGO_EXPECT[@]}"); else CMD+=("${STOCK_EXPECT[@]}"); fi
}

if has probe; then
  # What each way of bringing ncclgo in gives, without any communication.
  step probe-stock "$T_PROBE" 1 env -u LD_PRELOAD "${STOCK_ENV[@]}" "$PY" tests/torch/ncclinfo.py "${STOCK_EXPECT[@]}"
  step probe-preload "$T_PROBE" "$([[ $METHOD == preload ]] && echo 1 || echo 0)" \
    env LD_PRELOAD="$LIB" NCCLGO_FATBIN="$FATBIN" "$PY" tests/torch/ncclinfo.py "${NCCLGO_EXPECT[@]}"
  step probe-libpath "$T_PROBE" "$([[ $METHOD == libpath ]] && echo 1 || echo 0)" \
    env -u LD_PRELOAD LD_LIBRARY_PATH="$(dirname "$LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCLGO_FATBIN="$FATBIN" \
    "$PY" tests/torch/ncclinfo.py "${NCCLGO_EXPECT[@]}"
fi

for lib in $LIBS; do
  case $lib in ncclgo | stock) ;; *) die "LIBS: $lib is neither ncclgo nor stock" ;; esac
  if has collectives; then
    torch_cmd "$lib" collectives.py
    step "collectives-$lib" "$T_COLL" 1 "${CMD[@]}"
  fi
  if has ddp; then
    rm -f "$OUT/loss-$lib.json"
    torch_cmd "$lib" ddp.py --out "$OUT/loss-$lib.json"
    step "ddp-$lib" "$T_DDP" 1 "${CMD[@]}"
  fi
  if has split; then
    torch_cmd "$lib" collectives.py --device-id
    step "split-$lib" "$T_COLL" 1 "${CMD[@]}"
  fi
  if has extra; then
    torch_cmd "$lib" extra.py
    step "extra-$lib" "$T_COLL" 1 "${CMD[@]}"
  fi
  if has extra-eager; then
    torch_cmd "$lib" extra.py --device-id
    step "extra-eager-$lib" "$T_COLL" 1 "${CMD[@]}"
  fi
  if has fsdp; then
    torch_cmd "$lib" fsdp.py --steps "$FSDP_STEPS" --rtol "$FSDP_RTOL" --out "$OUT/fsdp-$lib.json"
    step "fsdp-$lib" "$T_FSDP" 1 "${CMD[@]}"
  fi
  if has latency; then
    torch_cmd "$lib" latency.py --iters "${LAT_ITERS:-200}"
    step "latency-$lib" "${T_LAT:-150}" 1 "${CMD[@]}"
  fi
  if has graph; then
    # Not in the default STEPS: tests/gpu-verify.sh's graph step runs it.
    torch_cmd "$lib" graph.py
    step "graph-$lib" "$T_COLL" 1 "${CMD[@]}"
  fi
  if has nojoin && ((NPROC > 1)); then
    if [[ $lib == ncclgo ]]; then
      torch_cmd "$lib" nojoin.py --timeout 20 --expect-text "$NOJOIN_TEXT"
      step "nojoin-$lib" "$T_NOJOIN" 1 "${CMD[@]}"
    else
      torch_cmd "$lib" nojoin.py --timeout 20
      step "nojoin-$lib" "$T_NOJOIN" 0 "${CMD[@]}"
    fi
  fi
done

if has compare; then
  if [[ -f $OUT/loss-ncclgo.json && -f $OUT/loss-stock.json ]]; then
    step compare 60 1 "$PY" tests/torch/compare_loss.py "$OUT/loss-ncclgo.json" "$OUT/loss-stock.json" --rtol 1e-5
  else
    echo "== compare: missing $OUT/loss-ncclgo.json or $OUT/loss-stock.json"
    TABLE+=("$(printf '%-22s %-8s' compare FAIL) (a loss file is missing)")
    FAILED=$((FAILED + 1))
  fi
fi

echo "== summary (logs in $OUT, $((SECONDS - T0))s)"
printf '%s\n' "${TABLE[@]}"
if ((FAILED)); then
  echo "TORCH-RUN-RESULT FAIL failed=$FAILED method=$METHOD nproc=$NPROC${HOSTS:+ hosts=$HOSTS}"
  exit 1
fi
echo "TORCH-RUN-RESULT OK method=$METHOD nproc=$NPROC${HOSTS:+ hosts=$HOSTS}"
