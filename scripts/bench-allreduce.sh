#!/usr/bin/env bash
# The CPU backend's gradient sum across processes (docs/performance.md,
# "Gradient sum across processes"). Usage:
#   [MB=100] [REPEAT=5] [PROCS="2 4"] scripts/bench-allreduce.sh [BUILD_DIR]
# For each process count, in one run on the same machine: the star sum
# (WDS_TRAIN_MPI_SUM=star: every process's buffer gathered at process 0,
# summed there in rank order, broadcast back: (P-1) x MB through process 0
# each way, as the retired rendezvous' data links moved it, now over MPI)
# and the default (alltoall of slices, each slice summed in rank order,
# allgather: about 2 (P-1)/P x MB per process), all over loopback; the
# median seconds of REPEAT all-reduces of MB megabytes of floats, and the
# result's checksum, which is the same for both (the same bits). Open MPI
# as root needs OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# (set here); more processes than cores need --oversubscribe (given).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
MB=${MB:-100}
REPEAT=${REPEAT:-5}
PROCS=${PROCS:-"2 4"}
bin=$BUILD/bench/wds_bench_allreduce
[ -x "$bin" ] || { echo "bench-allreduce.sh: build first: $bin" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench-allreduce.sh: no mpirun (apt-get install openmpi-bin)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
over=()
mpirun --version 2>/dev/null | grep -q 'Open MPI' && over=(--oversubscribe)
echo "# $(nproc) CPUs, $MB MB of floats, median of $REPEAT, loopback"
for p in $PROCS; do
  WDS_TRAIN_MPI_SUM=star mpirun -np "$p" "${over[@]}" "$bin" "$MB" "$REPEAT"
  mpirun -np "$p" "${over[@]}" "$bin" "$MB" "$REPEAT"
done
