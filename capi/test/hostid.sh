#!/bin/sh
# hostid.sh CMD [ARGS...]: runs CMD with NCCL_HOSTID naming this rank's
# fake host, so that one machine's processes count as NCCLGO_FAKE_HOSTS
# hosts (NET between them, P2P or SHM inside one). Rank r of n
# (OMPI_COMM_WORLD_RANK and _SIZE under mpirun, PMI_RANK and PMI_SIZE, or
# torchrun's RANK and WORLD_SIZE) is on host r*H/n: blocks of consecutive
# ranks, as ncclperf's -hosts. The ids are
# ${NCCLGO_HOSTID_PREFIX:-fakehost}-host<k>.
#   mpirun -np 4 -x NCCLGO_FAKE_HOSTS=2 capi/test/hostid.sh all_reduce_perf -c 1
#   NCCLGO_FAKE_HOSTS=2 torchrun --nproc_per_node 2 --no-python capi/test/hostid.sh python x.py
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${RANK:-}}}
n=${OMPI_COMM_WORLD_SIZE:-${PMI_SIZE:-${WORLD_SIZE:-}}}
h=${NCCLGO_FAKE_HOSTS:-}
if [ -z "$r" ] || [ -z "$n" ]; then
  echo "hostid.sh: no OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE (nor PMI_RANK/PMI_SIZE, RANK/WORLD_SIZE): run it under mpirun or torchrun" >&2
  exit 2
fi
case $h in
  '' | *[!0-9]*) echo "hostid.sh: NCCLGO_FAKE_HOSTS=\"$h\": want a number of hosts, 1 to $n" >&2; exit 2 ;;
esac
if [ "$h" -lt 1 ] || [ "$h" -gt "$n" ]; then
  echo "hostid.sh: NCCLGO_FAKE_HOSTS=$h: want 1 to $n (the ranks)" >&2
  exit 2
fi
[ $# -gt 0 ] || { echo "hostid.sh: no command to run" >&2; exit 2; }
NCCL_HOSTID=${NCCLGO_HOSTID_PREFIX:-fakehost}-host$((r * h / n))
export NCCL_HOSTID
[ -n "${NCCLGO_HOSTID_VERBOSE:-}" ] && echo "hostid.sh: rank $r of $n: NCCL_HOSTID=$NCCL_HOSTID" >&2
exec "$@"
