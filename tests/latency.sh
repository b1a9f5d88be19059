#!/usr/bin/env bash
# Small-message latency on one GPU (issue 26's figures), in one device
# call: 8 B AllReduce eager with 2 and 8 ranks of one process (tests/ab.sh,
# five rounds), CUDA-graph replay with a graph per rank at 2, 4 and 8
# ranks, one rank through the C ABI against the machine's NCCL in
# nccl-tests, and 2 processes sharing the GPU under MPS in nccl-tests over
# MPI, eager and `-G 100`. Every run checks its results (-c 1 where the
# time allows; the eager loops are -c 0 and their 0 wrong is ncclperf's
# count of failed calls).
#
# Usage, from the repository root on the device machine (as root for MPS):
#   NCCLGO_FATBIN=$PWD/build/full.fatbin bash tests/latency.sh [nccl-tests source dir]
# The nccl-tests directory defaults to third_party/nccl-tests; bundle/ is
# `make bundle`'s output. CPUS (default 4-11) pins the host loops.
set -uo pipefail
: "${NCCLGO_FATBIN:?set NCCLGO_FATBIN to the kernel set (an absolute path)}"
export NCCLGO_FATBIN
SRC=${1:-third_party/nccl-tests}
CPUS=${CPUS:-4-11}
echo "== eager (ab.sh, 5 rounds, CPUs $CPUS)"
for g in 2 8; do
  VARIANTS="g$g|bundle/bin/ncclperf" ARGS="-g $g -b 8 -e 8 -n 20000 -w 1000 -c 0" ROUNDS=5 CPUS=$CPUS OUT=/tmp/ab$g bash tests/ab.sh 2>&1 | tail -3
done
echo "== replay, a graph per rank"
for g in 2 2 2 2 2 2 4 8 8 8; do
  taskset -c $CPUS bundle/bin/ncclperf -g $g -b 8 -e 8 -G 100 -n 100 -w 5 -c 1 2>&1 | awk -v g=$g '/^ +8 /{print "G100 g="g, "time", $4, "wrong", $NF; exit}'
done
echo "== one rank, C ABI against NCCL (nccl-tests threads -g 1)"
for r in 1 2; do
  rm -f $SRC/all_reduce_*.log
  TESTS=all_reduce ARGS="-g 1 -b 8 -e 8 -n 20000 -w 1000 -c 1" taskset -c $CPUS bash capi/test/nccl-tests.sh $SRC bundle >/tmp/nt1.log 2>&1; echo "rc $?"
  for lib in ncclgo nccl; do awk -v l=$lib '$1 == 8 && NF >= 9 {print "one rank", l, "oop", $6, "wrong", $9, "ip", $10; exit}' $SRC/all_reduce_$lib.log; done
done
echo "== 2 processes under MPS (nccl-tests over MPI, eager and -G 100)"
MPS=$PWD/build/mps; mkdir -p $MPS/pipe $MPS/log
export CUDA_MPS_PIPE_DIRECTORY=$MPS/pipe CUDA_MPS_LOG_DIRECTORY=$MPS/log
nvidia-cuda-mps-control -d && sleep 1
for a in "-n 20000 -w 1000" "-n 20000 -w 1000" "-n 100 -w 5 -G 100" "-n 100 -w 5 -G 100"; do
  rm -f $SRC/all_reduce_*.log
  MPI=1 NP=2 NCCL_TESTS_DEVICE=0 SYSTEM_NCCL_LIB=none TESTS=all_reduce ARGS="-g 1 -b 8 -e 8 -c 1 $a" bash capi/test/nccl-tests.sh $SRC bundle >/tmp/ntm.log 2>&1; echo "rc $?"
  awk -v a="$a" '$1 == 8 && NF >= 9 {print "mps2", a, "oop", $6, "wrong", $9; exit}' $SRC/all_reduce_ncclgo.log
done
echo quit | nvidia-cuda-mps-control; sleep 1
tail -5 /tmp/ntm.log

