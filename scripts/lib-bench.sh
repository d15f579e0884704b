#!/usr/bin/env bash
# lib-bench.sh — shared by the benchmark scripts (sourced, not run).
#
#   source "$(dirname "$0")/lib-bench.sh"
#   bench_check_devnull bench-read.sh
#
# bench_check_devnull NAME: the benchmarks send measured output to
# /dev/null. If /dev/null is not the null device (a character device,
# 1:3 on Linux) — e.g. a tool run as root once renamed a regular file over
# it — that output lands on disk and every figure is wrong: refuse to
# measure. WDS_BENCH_DEVNULL names another path to check (for the tests).
bench_check_devnull() {
  local name=$1 dev=${WDS_BENCH_DEVNULL:-/dev/null} kind
  kind=$(stat -L -c '%F %t:%T' "$dev" 2>/dev/null || echo "missing")
  if [ "$kind" != "character special file 1:3" ]; then
    {
      echo "$name: $dev is not the null device (it is: $kind), so output"
      echo "  sent there is written somewhere and the measurements would be wrong."
      echo "  Restore it (as root): rm -f /dev/null && mknod -m 666 /dev/null c 1 3"
    } >&2
    exit 1
  fi
}
