#!/usr/bin/env bash
# JPEG decoded on the GPU (docs/performance.md, "JPEG on the
# GPU"): on the 2,000 photo-like 500x375 JPEGs of bench-peers.sh (resize the
# shorter side, center crop 224, batches of 64; 1 warm-up epoch + EPOCHS
# timed), rounds alternating:
#   cpu W    wds.Loader(device="cuda"), JPEGs decoded by W workers (CPU)
#   gpu W    wds.Loader(device="cuda", jpeg_decode="gpu"): W workers plan,
#            nvJPEG decodes, a kernel resizes and crops
#   tv       torchvision.io.decode_jpeg(list, device="cuda") + resize/crop
#            on the GPU in one process (the reference)
# and prints images/s and the CPU threads each used (process CPU time over
# wall time): gpu at GPU_WORKERS (goal >= 15,000/s with <= 4), the
# ratio gpu / cpu at CPU_WORKERS (goal >= 1.5 at 15), and gpu / tv. Then
# ResNet-50 in bf16 fed by wds (gpu decode, GPU_WORKERS workers; and the
# CPU path at CPU_WORKERS) with its data-wait share (goal < 2%).
#
# Usage: scripts/bench-gpu-jpeg.sh [BUILD_DIR] [DATA_DIR]
# Environment: PY (torch + torchvision + numpy + Pillow; default
# /opt/torch/.venv/bin/python3, else python3), RUNS (3), EPOCHS (2),
# GPU_WORKERS (4), CPU_WORKERS (15), STEPS (60), WDS_BENCH_NO_RESNET=1.
# Without a CUDA GPU, or without the GPU decoder in the build, it says
# "not measured: ..." and exits 0.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib-bench.sh"
DATA=${2:-/tmp/wds-bench-data}
RUNS=${RUNS:-3}
EPOCHS=${EPOCHS:-2}
GPU_WORKERS=${GPU_WORKERS:-4}
CPU_WORKERS=${CPU_WORKERS:-15}
STEPS=${STEPS:-60}
bench_gpu_setup bench-gpu-jpeg.sh "${1:-}"
if ! why=$("$PY" -c 'import wds; g = wds._wds.gpu_jpeg_open(0); print(g.stats()["library"])' 2>&1); then
  echo "bench-gpu-jpeg.sh: not measured: no GPU JPEG decoder: ${why##*Error: }"
  exit 0
fi
echo "bench-gpu-jpeg.sh: $(date -u +%FT%TZ), $(nproc) cores, $("$PY" -c 'import torch, torchvision; print(torch.cuda.get_device_name(), "torch", torch.__version__, "torchvision", torchvision.__version__)'), nvJPEG: $why"
bench_jpeg_set "$PY" "$root" "$DATA"
spec=$JPEG_SPEC
common=("$spec" "jpg:rgb:224,cls" 64 --warmup-epochs 1 --epochs "$EPOCHS" --touch arrays --device cuda)
# run_cpu CMD...: "images/s:cpu_threads" of one run (its JSON line's
# samples_per_s, and the CPU time of all its threads over the timed wall
# time: the CPU threads the decode used)
run_cpu() {
  local out
  out=$("$@") || bench_die "failed: $*"
  "$PY" -c 'import json,sys; r = json.loads(sys.stdin.read().strip().splitlines()[-1]); print(str(r["samples_per_s"]) + ":" + str(r.get("cpu_threads", "nan")))' <<<"$out"
}
G="" C="" T=""
for _ in $(seq "$RUNS"); do
  G+=" $(run_cpu "$PY" "$PYB/loader_overhead.py" "${common[@]}" --workers "$GPU_WORKERS" --jpeg-decode gpu)"
  C+=" $(run_cpu "$PY" "$PYB/loader_overhead.py" "${common[@]}" --workers "$CPU_WORKERS")"
  T+=" $(run_cpu "$PY" "$PYB/gpu_jpeg.py" torchvision "${JPEG_TARS[@]}" --epochs "$EPOCHS")"
done
echo
echo "images/s at 224 and CPU threads used (process CPU time / wall time), medians of $RUNS rounds"
"$PY" - "$G" "$C" "$T" "$GPU_WORKERS" "$CPU_WORKERS" <<'PYEOF'
import statistics, sys
runs = [[tuple(map(float, r.split(":"))) for r in s.split()] for s in sys.argv[1:4]]
(g, gc), (c, cc), (t, tc) = [tuple(zip(*r)) for r in runs]
med = statistics.median
print(f"wds gpu decode, {sys.argv[4]} workers: {med(g):9.0f}   cpu threads {med(gc):5.2f}"
      f"   (goal >= 15000 with <= 4)")
print(f"wds cpu decode, {sys.argv[5]} workers: {med(c):9.0f}   cpu threads {med(cc):5.2f}"
      f"   gpu/cpu {med([x / y for x, y in zip(g, c)]):.2f} (goal >= 1.5)")
print(f"torchvision nvJPEG reference:    {med(t):9.0f}   cpu threads {med(tc):5.2f}"
      f"   gpu/tv {med([x / y for x, y in zip(g, t)]):.2f}")
PYEOF
if [ "${WDS_BENCH_NO_RESNET:-0}" != 1 ] && "$PY" -c 'import torchvision' 2>/dev/null; then
  echo
  echo "ResNet-50 bf16, batches of 128, $STEPS steps (goal: data wait < 2% with 4 workers)"
  for mode in "gpu $GPU_WORKERS" "cpu $CPU_WORKERS"; do
    set -- $mode
    "$PY" "$PYB/gpu_jpeg.py" resnet50 "$spec" --jpeg-decode "$1" --workers "$2" \
      --steps "$STEPS" || bench_die "resnet50 ($mode) failed"
  done
fi
