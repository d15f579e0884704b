#!/usr/bin/env bash
# The MPI tests (ctest label mpi: test_pg_mpi_np2/_np4/_np4_star,
# tools_train_mpi, tools_train_mpi_torchrun, netns, slurm) against MPICH, in
# a build of their own of only the targets they run (Open MPI is the default
# MPI of a Debian machine with both; the code is MPI standard only).
# scripts/test.sh runs it beside its plain ctest. Usage:
#   scripts/test-mpich.sh [BUILD_DIR] [extra cmake args...]
#   (BUILD_DIR default: build-mpich in the checkout)
# Needs libmpich-dev and mpich (scripts/setup.sh installs them).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-mpich}
shift || true
mpicc=$(command -v mpicc.mpich) || { echo "test-mpich.sh: no mpicc.mpich (apt-get install libmpich-dev mpich)" >&2; exit 1; }
mpiexec=$(command -v mpiexec.mpich) || { echo "test-mpich.sh: no mpiexec.mpich" >&2; exit 1; }
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWDS_WITH_CUDA=OFF \
  -DWDS_PYTHON=OFF -DWDS_WITH_MPI=ON -DMPI_C_COMPILER="$mpicc" \
  -DMPIEXEC_EXECUTABLE="$mpiexec" "$@" >/dev/null
grep -q '^MPI_C_COMPILER:[A-Z]*=.*mpich' "$build/CMakeCache.txt" ||
  { echo "test-mpich.sh: $build is not configured with MPICH" >&2; exit 1; }
cmake --build "$build" -j "$(nproc)" --target wds_train wds_cli test_pg_mpi
cd "$build" && ctest -L mpi --output-on-failure
