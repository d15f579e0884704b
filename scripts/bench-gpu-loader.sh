#!/usr/bin/env bash
# The loader to a GPU (docs/performance.md, "Batches on the GPU"): on the
# 2,000 photo-like JPEGs of bench-peers.sh (decode, resize the shorter side,
# center crop 224, batches of 64, 1 warm-up epoch + EPOCHS timed), per
# worker count, rounds alternating:
#   host     wds.Loader's host batches, every field touched (the reference)
#   device   wds.Loader(device="cuda"): the same batches as tensors on the GPU
#   torch    torch DataLoader + webdataset 1.0.2 (pin_memory=True), each
#            batch copied with .to("cuda", non_blocking=True)
# and prints images/s with the ratios device/host (goal >= 0.97) and
# device/torch (goal >= 3 at 15 workers on 16 cores).
#
# Usage: scripts/bench-gpu-loader.sh [BUILD_DIR] [DATA_DIR]
# Environment: PY (an interpreter with torch, numpy, Pillow and webdataset;
# default /opt/torch/.venv/bin/python3, else python3), PYTHONPATH extras
# kept, RUNS (3), EPOCHS (2), WORKERS ("4 15"), JPEG_SHARDS (other shards,
# space-separated), WDS_BENCH_NO_TORCH_WDS=1
# leaves the torch row out. Without a CUDA GPU it says so and exits 0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib-bench.sh"
DATA=${2:-/tmp/wds-bench-data}
RUNS=${RUNS:-3}
EPOCHS=${EPOCHS:-2}
WORKERS=${WORKERS:-4 15}
bench_gpu_setup bench-gpu-loader.sh "${1:-}"
TORCH_WDS=1
if [ "${WDS_BENCH_NO_TORCH_WDS:-0}" = 1 ] || ! "$PY" -c 'import webdataset' 2>/dev/null; then
  TORCH_WDS=0
fi
bench_jpeg_set "$PY" "$root" "$DATA"
spec=$JPEG_SPEC
echo "bench-gpu-loader.sh: $(date -u +%FT%TZ), $(nproc) cores, $("$PY" -c 'import torch; print(torch.cuda.get_device_name(), "torch", torch.__version__)'), RUNS=$RUNS EPOCHS=$EPOCHS"
stats() {
  "$PY" - "$@" <<'PYEOF'
import statistics, sys
h, d, t = [list(map(float, s.split())) for s in sys.argv[1:4]]
med = statistics.median
row = f"{med(h):9.0f} {med(d):9.0f} {med([x / y for x, y in zip(d, h)]):8.3f}"
if t:
    row += f" {med(t):9.0f} {med([x / y for x, y in zip(d, t)]):8.2f}"
else:
    row += f" {'-':>9} {'-':>8}"
print(row)
PYEOF
}
echo
echo "images/s, medians of $RUNS rounds (ratios: medians of the per-round ratios)"
echo "workers      host    device dev/host     torch dev/torch"
for w in $WORKERS; do
  H="" D="" T=""
  for _ in $(seq "$RUNS"); do
    common=("$spec" "jpg:rgb:224,cls" 64 --workers "$w" --warmup-epochs 1 --epochs "$EPOCHS" --touch arrays)
    H+=" $(bench_run "$PY" "$PYB/loader_overhead.py" "${common[@]}")"
    D+=" $(bench_run "$PY" "$PYB/loader_overhead.py" "${common[@]}" --device cuda)"
    if [ "$TORCH_WDS" = 1 ]; then
      T+=" $(bench_run "$PY" "$PYB/peers.py" torch-wds "${JPEG_TARS[@]}" --workers "$w" \
        --warmup-epochs 1 --epochs "$EPOCHS" --batch-size 64 --device cuda)"
    fi
  done
  printf "%7s %s\n" "$w" "$(stats "$H" "$D" "$T")"
done
[ "$TORCH_WDS" = 1 ] || echo "(torch: not measured: no webdataset for $PY)"
