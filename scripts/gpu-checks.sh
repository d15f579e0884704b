#!/usr/bin/env bash
# The GPU checks in one command, on a machine with an NVIDIA GPU, the CUDA
# toolkit (nvcc, cuBLAS) and NCCL (looked for in /usr/local/cuda):
#   * builds with -DWDS_WITH_CUDA=ON (fails if nvcc, cuBLAS or NCCL is
#     missing rather than building without them);
#   * runs the ctest label gpu, verbosely: test_loader_gpu (pinned slots),
#     test_trainer_gpu (CUDA against the CPU backend, one-rank NCCL, H2D of
#     pinned batches against plain pinned cudaMemcpy, abort with 2 GPUs),
#     tools_train_gpu (train.sh on --device cuda: learnable, identical
#     weights per step, uneven shards, stop/resume, 2 processes with 2 GPUs,
#     the demo's data-wait);
#   * prints the figures docs/performance.md reports (H2D ratio, demo
#     data-wait and samples/s).
# Without a GPU every gpu test reports "Skipped".
# Usage: scripts/gpu-checks.sh [BUILD_DIR] (default build-gpu); set
# WDS_SKIP_SETUP=1 where build dependencies are already unpacked (no apt).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu}
if [ "${WDS_SKIP_SETUP:-0}" = 1 ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DWDS_WITH_CUDA=ON ${WDS_CMAKE_ARGS:-} >/dev/null
  cmake --build "$build" -j "$(nproc)"
else
  "$root/scripts/setup.sh" "$build" -DWDS_WITH_CUDA=ON
fi
nvidia-smi -L || true
log=$build/gpu-checks.log
rc=0
(cd "$build" && ctest -L gpu -V --timeout 900) 2>&1 | tee "$log" || rc=$?
echo "--- figures"
grep -E "H2D of|gradient max error|demo on the GPU|H2D GB/s|identical weights|Skipped|FAIL" "$log" || true
exit "$rc"
