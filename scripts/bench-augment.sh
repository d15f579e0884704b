#!/usr/bin/env bash
# The loader's built-in augmentation (RandomResizedCrop, flip, ColorJitter,
# Normalize: issue 33 item 3) against torchvision's, per image on one
# thread and as loaders (docs/performance.md, "Augmentation"). One command:
#   scripts/bench-augment.sh [BUILD_DIR] [DATA_DIR] [VENV_DIR]
# BUILD_DIR  a build with the Python extension (default: build)
# DATA_DIR   where the data is made once (default /tmp/wds-bench-data):
#            photo256/photos-{00..03}.tar, 1,000 photo-like 256x256 JPEGs
#            (scripts/gen-photo-jpegs.py --seed 1, quality 90) with .cls
# VENV_DIR   an environment with numpy, Pillow, torch, torchvision and
#            webdataset (default BUILD_DIR/py-venv, the one python_tree
#            makes; run `ctest -R python_tree` once first)
# Environment: RUNS (default 3) rounds, WORKERS (default 2) for the loader
# rows, SECTIONS (default "image loader"). Every figure is the median of
# RUNS; the loaders' rounds alternate, and their ratio is the median of the
# rounds' ratios (python/bench/augment.py says what each row measures). The
# loaders' rows give the wall-clock rate and the CPU time per sample (the
# process's and the DataLoader workers', user + system): on a shared machine
# the CPU-time ratio (webdataset's / wds's) is the steadier of the two.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib-bench.sh"
bench_check_devnull bench-augment.sh
BUILD=$(cd "${1:-$root/build}" 2>/dev/null && pwd) || {
  echo "bench-augment.sh: no build directory ${1:-$root/build}" >&2
  exit 1
}
DATA=${2:-/tmp/wds-bench-data}
VENV=${3:-$BUILD/py-venv}
RUNS=${RUNS:-3}
WORKERS=${WORKERS:-2}
SECTIONS=${SECTIONS:-image loader}
PY=$VENV/bin/python
BASE=$BUILD/bench/wds_augment_baseline
die() {
  echo "bench-augment.sh: $*" >&2
  exit 1
}
[ -x "$PY" ] || die "no $PY (run ctest -R python_tree once, or give VENV_DIR)"
[ -x "$BASE" ] || die "build first: $BASE"
export PYTHONPATH=$BUILD/python
"$PY" -c 'import wds, torch, torchvision, webdataset, PIL' ||
  die "$PY needs wds (the build's extension), torch, torchvision, webdataset and Pillow"

d=$DATA/photo256
if [ ! -f "$d/done" ]; then
  rm -rf "$d"
  "$PY" "$root/scripts/gen-photo-jpegs.py" "$d" --count 1000 --seed 1 \
    --width 256 --height 256 >/dev/null
  "$PY" - "$d" <<'PYEOF'
import io, os, sys, tarfile
d = sys.argv[1]
names = sorted(n for n in os.listdir(d) if n.endswith(".jpg"))
for s in range(4):
    with tarfile.open(os.path.join(d, f"photos-{s:02d}.tar"), "w",
                      format=tarfile.USTAR_FORMAT) as t:
        for i, n in enumerate(names[s * 250:(s + 1) * 250]):
            key = f"p{s}_{i:04d}"
            t.add(os.path.join(d, n), arcname=key + ".jpg")
            cls = str(i % 10).encode()
            ti = tarfile.TarInfo(key + ".cls")
            ti.size = len(cls)
            t.addfile(ti, io.BytesIO(cls))
PYEOF
  touch "$d/done"
fi
shards=("$d"/photos-0{0,1,2,3}.tar)
cat "${shards[@]}" >/dev/null

echo "bench-augment.sh: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "RUNS=$RUNS; $("$PY" -c 'import sys, PIL, torch, torchvision, webdataset; print("Python", sys.version.split()[0], "pillow", PIL.__version__, "torch", torch.__version__, "torchvision", torchvision.__version__, "webdataset", webdataset.__version__)')"

# one KIND [ARGS]: the median of RUNS of FIELD (ms_per_image or samples_per_s)
one() {
  local field=$1 kind=$2 vals="" out
  shift 2
  for _ in $(seq "$RUNS"); do
    out=$("$PY" "$root/python/bench/augment.py" "$kind" "${shards[@]}" "$@") ||
      die "$kind failed"
    vals+="$("$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$field" <<<"$out") "
  done
  tr ' ' '\n' <<<"$vals" | grep . | bench_median
}
# base FIELD: the median of RUNS of FIELD of wds_augment_baseline over the
# JPEG files (ms per image, the thread's CPU time)
base() {
  local vals="" out
  for _ in $(seq "$RUNS"); do
    out=$("$BASE" --repeat 1 "$d"/000[0-4]??.jpg) || die "wds_augment_baseline failed"
    vals+="$("$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$1" <<<"$out") "
  done
  tr ' ' '\n' <<<"$vals" | grep . | bench_median
}
if [[ " $SECTIONS " == *" image "* ]]; then
printf '%-44s %10s\n' "per 224x224 image, one thread (CPU time)" "ms/image"
for k in jitter-pil jitter-tensor; do
  printf '%-44s %10s\n' "$k" "$(one ms_per_image "$k")"
done
printf '%-44s %10s\n' "jitter-wds" "$(base jitter_ms)"
for k in pipe-pil pipe-tensor; do
  printf '%-44s %10s\n' "$k" "$(one ms_per_image "$k")"
done
printf '%-44s %10s\n' "pipe-wds" "$(base pipe_ms)"
printf '%-44s %10s\n' "crop-wds (decode + crop + flip alone)" "$(base crop_ms)"
fi
if [[ " $SECTIONS " == *" loader "* ]]; then
  # rounds alternate the two loaders, so that a change of load hits both;
  # the ratio is the median of the rounds' ratios
  # loader_run KIND: "samples/s CPU-ms/sample" of one run
  loader_run() {
    local out
    out=$("$PY" "$root/python/bench/augment.py" "$1" "${shards[@]}" --workers "$WORKERS") ||
      die "$1 failed"
    "$PY" -c 'import json,sys; j = json.loads(sys.stdin.read().splitlines()[-1]); print(j["samples_per_s"], j["cpu_ms_per_sample"])' <<<"$out"
  }
  wd="" ws="" rs="" cd="" cs="" cr=""
  for _ in $(seq "$RUNS"); do
    read -r a ac < <(loader_run loader-webdataset)
    read -r b bc < <(loader_run loader-wds)
    wd+="$a " ws+="$b " rs+="$("$PY" -c "print($b / $a)") "
    cd+="$ac " cs+="$bc " cr+="$("$PY" -c "print($ac / $bc)") "
  done
  med() { tr ' ' '\n' <<<"$1" | grep . | bench_median; }
  printf '%-44s %10s %14s\n' "loaders, $WORKERS workers, batches of 64" "samples/s" "CPU ms/sample"
  printf '%-44s %10s %14s\n' "loader-webdataset" "$(med "$wd")" "$(med "$cd")"
  printf '%-44s %10s %14s\n' "loader-wds" "$(med "$ws")" "$(med "$cs")"
  printf '%-44s %10s %14s\n' "wds / webdataset (median of the rounds)" "$(med "$rs")" "$(med "$cr")"
fi
