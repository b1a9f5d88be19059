#!/usr/bin/env bash
# nccl-tests on ncclgo's libnccl.so.2 (and, for comparison, on the
# machine's NCCL): builds NVIDIA/nccl-tests against ncclgo's nccl.h and
# runs its perf tests with data checks in threads mode (-g 2).
#
# Usage (from the repository root, on the GPU machine):
#   bash capi/test/nccl-tests.sh <nccl-tests source dir> [<dir with lib/ and include/>]
# The second argument defaults to bundle/ (what `make bundle` builds).
# Environment: NCCL_DEVICE_INCLUDE (directory holding NCCL 2.28's
# nccl_device.h and nccl_device/, which nccl-tests includes at API 2.28;
# searched for when unset), SYSTEM_NCCL_LIB (directory of the machine's
# libnccl.so.2; searched for when unset; "none" skips that run),
# NCCLGO_FATBIN (default: <lib>/ncclgo.fatbin, else build/ncclgo.fatbin),
# TESTS, ARGS, GENCODE. MPI=1 builds nccl-tests with MPI (OpenMPI's
# include and lib directories from mpicc -showme) into build-mpi/ and runs
# each test under `mpirun -np NP` (NP default 2; LAUNCH replaces the whole
# launcher), every process one rank with ARGS' -g; NCCL_TESTS_DEVICE=0
# puts every process on GPU 0 (which ncclgo runs under MPS; the stock
# NCCL refuses ranks that share a GPU, so set SYSTEM_NCCL_LIB=none then).
# HOSTS=H (with MPI=1) makes the NP processes H fake hosts: each runs
# through capi/test/hostid.sh, which sets NCCL_HOSTID from its MPI rank
# (blocks of consecutive ranks), so that NET joins the hosts;
# NCCL_SOCKET_IFNAME (default lo with HOSTS) reaches every rank.
# ROWS=1 prints every size's row of each run besides its summary.
# BIN_LIST (e.g. "all_reduce all_gather") builds only those tests (nccl-tests'
# BIN_FILES_LIST); by default it builds them all.
set -euo pipefail
src=$(cd "$1" && pwd)
root=$(cd "${2:-bundle}" && pwd)
lib=$root/lib
[ -f "$lib/libnccl.so.2" ] || { echo "no $lib/libnccl.so.2: run make libnccl or make bundle first"; exit 1; }
home=$src/ncclgo_home
mkdir -p "$home/include"
cp "$root/include/nccl.h" "$home/include/nccl.h"
ln -sfn "$lib" "$home/lib"

pyinc() { python3 -c 'import nvidia.nccl as n, os; print(os.path.join(list(n.__path__)[0], "'"$1"'"))' 2>/dev/null || true; }
dev=${NCCL_DEVICE_INCLUDE:-}
# The device headers must come from a NCCL at least as new as the API
# level ncclgo's nccl.h claims: nccl-tests compiles the device-API code of
# that level (e.g. 2.28.7's GIN in alltoall.cu).
code() { awk '/^#define NCCL_VERSION_CODE /{print $3; exit}' "$1" 2>/dev/null; }
want=$(code "$home/include/nccl.h")
if [ -z "$dev" ]; then
  for d in "$(pyinc include)" /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/include \
           /usr/include /usr/local/include /usr/local/cuda/include; do
    [ -n "$d" ] && [ -f "$d/nccl_device.h" ] || continue
    have=$(code "$d/nccl.h")
    if [ -n "$have" ] && [ -n "$want" ] && [ "$have" -ge "$want" ]; then dev=$d; break; fi
    [ -n "$dev" ] || dev=$d # an older one only when no newer one exists
  done
fi
[ -n "$dev" ] || dev=$(dirname "$(find / -xdev -name nccl_device.h -path '*include*' 2>/dev/null | head -1)")
if [ -f "$dev/nccl_device.h" ]; then
  echo "== NCCL device-API headers from $dev (nccl-tests includes them at API 2.28; ncclgo does not implement that API)"
  cp -r "$dev/nccl_device.h" "$dev/nccl_device" "$home/include/"
else
  # Without NCCL's device headers, build nccl-tests at API 2.27, which
  # leaves the device-API code out; the ABI it uses is the same.
  echo "== no nccl_device.h found (set NCCL_DEVICE_INCLUDE): building nccl-tests at API level 2.27"
  sed -i 's/^#define NCCL_MINOR 28$/#define NCCL_MINOR 27/; s/^#define NCCL_VERSION_CODE 228\(..\)$/#define NCCL_VERSION_CODE 227\1/' "$home/include/nccl.h"
  grep -q "NCCL_VERSION_CODE 227" "$home/include/nccl.h" || { echo "could not lower the API level of $home/include/nccl.h"; exit 1; }
fi

mpi=${MPI:-0} bdir=$src/build mpiargs=() launch=()
if [ "$mpi" = 1 ]; then
  # nccl-tests wants MPI_HOME/include and MPI_HOME/lib: stage them from mpicc.
  mh=$src/mpi_home
  mkdir -p "$mh"
  ln -sfn "$(mpicc -showme:incdirs | awk '{print $1}')" "$mh/include"
  ln -sfn "$(mpicc -showme:libdirs | awk '{print $1}')" "$mh/lib"
  bdir=$src/build-mpi mpiargs=(MPI=1 MPI_HOME="$mh")
  # shellcheck disable=SC2206
  launch=(${LAUNCH:-mpirun --allow-run-as-root --oversubscribe -np ${NP:-2} -x NCCLGO_FATBIN -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE
    -x NCCL_TESTS_DEVICE -x CUDA_MPS_PIPE_DIRECTORY -x CUDA_MPS_LOG_DIRECTORY -x NCCL_DEBUG})
  # Every NCCL_* and NCCLGO_* setting reaches the ranks (mpirun passes the
  # environment on to local processes only).
  for v in $(compgen -e | grep -E '^NCCL(GO)?_' || true); do launch+=(-x "$v"); done
  if [ -n "${HOSTS:-}" ]; then
    export NCCLGO_FAKE_HOSTS=$HOSTS NCCLGO_HOSTID_PREFIX=${NCCLGO_HOSTID_PREFIX:-nt$$} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
    launch+=(-x NCCLGO_FAKE_HOSTS -x NCCLGO_HOSTID_PREFIX -x NCCL_SOCKET_IFNAME -x NCCL_DEBUG_SUBSYS "$(cd "$(dirname "$0")" && pwd)/hostid.sh")
  fi
elif [ -n "${HOSTS:-}" ]; then
  echo "HOSTS=$HOSTS needs MPI=1: fake hosts are processes"; exit 1
fi

echo "== building nccl-tests against ncclgo's nccl.h (MPI=$mpi)"
[ -n "${BIN_LIST:-}" ] && mpiargs+=(BIN_FILES_LIST="$BIN_LIST")
make -C "$src" -j"$(nproc)" MPI="$mpi" "${mpiargs[@]}" BUILDDIR="$bdir" NCCL_HOME="$home" CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}" \
  NVCC_GENCODE="${GENCODE:--gencode=arch=compute_90,code=sm_90}" >"$src/build.log" 2>&1 ||
  { tail -40 "$src/build.log"; exit 1; }

sys=${SYSTEM_NCCL_LIB:-}
if [ -z "$sys" ]; then
  sys=$(dirname "$(ldconfig -p | awk '/libnccl.so.2 /{print $NF; exit}')" 2>/dev/null || true)
  [ -f "$sys/libnccl.so.2" ] || sys=$(pyinc lib)
fi
fatbin=${NCCLGO_FATBIN:-}
[ -n "$fatbin" ] || { [ -f "$lib/ncclgo.fatbin" ] && fatbin=$lib/ncclgo.fatbin || fatbin=$PWD/build/ncclgo.fatbin; }
export NCCL_NVLS_ENABLE=0

fail=0
for t in ${TESTS:-all_reduce all_gather reduce_scatter broadcast reduce sendrecv alltoall gather scatter}; do
  for which in ncclgo nccl; do
    libdir=$lib
    if [ "$which" = nccl ]; then
      [ "$sys" != none ] && [ -f "$sys/libnccl.so.2" ] || continue
      libdir=$sys
    fi
    log=$src/${t}_$which.log
    echo "== ${t}_perf on $which ($libdir)${launch[0]:+ under ${launch[*]:0:3}}${HOSTS:+, $HOSTS fake hosts}"
    rc=0
    # shellcheck disable=SC2086
    NCCLGO_FATBIN=$fatbin LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      timeout 900 "${launch[@]}" "$bdir/${t}_perf" ${ARGS:--b 8 -e 1G -f 4 -g 2 -c 1} >"$log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
      echo "   FAILED (exit $rc); tail of $log:"; tail -15 "$log"; fail=1; continue
    fi
    grep -E "nccl-tests version|NCCL version|Out of bounds|Avg bus bandwidth" "$log" | sed 's/^/   /'
    [ -z "$ROWS" ] || grep -E '^ +[0-9]+ ' "$log" | sed 's/^/   /' # ROWS=1: every size's row too
    grep -q "Out of bounds values : 0 OK" "$log" || fail=1
  done
done
exit $fail
