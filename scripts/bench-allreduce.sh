#!/usr/bin/env bash
# The CPU backend's gradient sum across processes (docs/performance.md,
# "Gradient sum across processes"). Usage:
#   [MB=100] [REPEAT=5] [PROCS="2 4"] scripts/bench-allreduce.sh [BUILD_DIR]
# For each process count, in one run on the same machine: the rendezvous'
# star sum (every process's buffer to process 0 over a data link, summed
# there in rank order, sent back: (P-1) x MB through process 0 each way)
# and MPI's (mpirun: alltoall of slices, each slice summed in rank order,
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
  port=$((20000 + RANDOM % 20000))
  pids=()
  for ((r = 1; r < p; r++)); do
    "$bin" "$MB" "$REPEAT" "$p" "$r" "$port" &
    pids+=($!)
  done
  "$bin" "$MB" "$REPEAT" "$p" 0 "$port"
  for pid in "${pids[@]}"; do wait "$pid"; done
  mpirun -np "$p" "${over[@]}" "$bin" "$MB" "$REPEAT"
done
