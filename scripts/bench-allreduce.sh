#!/usr/bin/env bash
# The CPU backend's gradient sum across processes (docs/performance.md,
# "Gradient sum across processes"). Usage:
#   [MB=100] [REPEAT=5] [PROCS="2 4"] [NETS="lo netns"] scripts/bench-allreduce.sh [BUILD_DIR]
# For each network and process count, in one run on the same machine: the
# star sum (WDS_TRAIN_MPI_SUM=star: every process's buffer gathered at
# process 0, summed there in rank order, broadcast back: (P-1) x MB through
# process 0 each way, as the retired rendezvous' data links moved it, now
# over MPI; over loopback only) and the default (alltoall of slices, each
# slice summed in rank order, allgather: about 2 (P-1)/P x MB per process); the
# median seconds of REPEAT all-reduces of MB megabytes of floats, and the
# result's checksum, which is the same for both (the same bits).
#   lo:    every process here, over loopback (MPIEXEC -n P).
#   netns: two "nodes" in network namespaces joined by veth links
#          (tests/integration/lib-netns.sh: root only), P/2 processes on
#          each, MPI over TCP on eth0 only, launched through an agent that
#          runs `ip netns exec` in place of ssh.
# netns rows also print the bytes node 1 sent on its eth0.
# MPIEXEC names the launcher (default: the build's MPIEXEC_EXECUTABLE, else
# mpirun). Open MPI as root needs OMPI_ALLOW_RUN_AS_ROOT=1
# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 (set here); more processes than cores
# need --oversubscribe (given to Open MPI).
# Run it as `nice -n -10 scripts/bench-allreduce.sh` on a shared machine:
# the processes inherit the priority, and other builds disturb them less.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
MB=${MB:-100}
REPEAT=${REPEAT:-5}
PROCS=${PROCS:-"2 4"}
NETS=${NETS:-"lo netns"}
bin=$BUILD/bench/wds_bench_allreduce
[ -x "$bin" ] || { echo "bench-allreduce.sh: build first: $bin" >&2; exit 1; }
mpiexec=${MPIEXEC:-$(sed -n 's/^MPIEXEC_EXECUTABLE:FILEPATH=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)}
[ -n "$mpiexec" ] || mpiexec=mpirun
command -v "$mpiexec" >/dev/null || { echo "bench-allreduce.sh: no $mpiexec (apt-get install openmpi-bin)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
over=()
"$mpiexec" --version 2>/dev/null | grep -qE 'Open MPI|OpenRTE' && over=(--oversubscribe)
echo "# $(nproc) CPUs, $MB MB of floats, median of $REPEAT, load $(cut -d' ' -f1-3 /proc/loadavg), nice $(nice)"
for net in $NETS; do
  if [ "$net" = netns ]; then
    source "$root/tests/integration/lib-netns.sh"
    tmp=$(mktemp -d)
    trap 'netns_down; rm -rf "$tmp"' EXIT
    netns_up "wdsbench$$" || { echo "bench-allreduce.sh: $NETNS_ERR" >&2; exit 1; }
  fi
  for p in $PROCS; do
    echo "# $net, $p processes"
    if [ "$net" = lo ]; then
      WDS_TRAIN_MPI_SUM=star "$mpiexec" -n "$p" "${over[@]}" "$bin" "$MB" "$REPEAT"
      "$mpiexec" -n "$p" "${over[@]}" "$bin" "$MB" "$REPEAT"
    else
      netns_mpi "$mpiexec" "$tmp" $((p / 2)) || { echo "bench-allreduce.sh: $NETNS_ERR" >&2; exit 1; }
      tx0=$(netns_tx 1)
      "${MPI_NET[@]}" -n "$p" "$bin" "$MB" "$REPEAT"
      echo "#   node 1 sent $((($(netns_tx 1) - tx0) / 1000000)) MB on eth0"
    fi
  done
done
