#!/usr/bin/env bash
# bench-dataset.sh — a torchvision v2 pipeline (RandomResizedCrop 224, flip,
# ColorJitter, Normalize) and a caption tokenizer in DataLoader workers,
# batch 64, fed by wds.Dataset, wds.WebDataset and Python webdataset from the
# same shards of 256x256 photo-like JPEGs (issue 33; docs/performance.md).
#
# Usage: scripts/bench-dataset.sh [BUILD_DIR] [WORKERS] [IMAGES] [MODE]
#   (defaults: build, 2, 1024, images). MODE captions: the captions alone
#   (txt and cls fields, tokenized in the workers; no image decoded).
#   Needs the test venv (ctest python_tree makes it: torch, torchvision,
#   webdataset; WDS_BENCH_PYTHON names another interpreter). The shards are
#   made once in BUILD_DIR/bench-dataset/. WDS_BENCH_PASSES: passes
#   (default 4, pass 0 included).
# The ways alternate pass by pass. Prints each way's images/s and CPU time
# per image (the main process and the DataLoader's workers, user + system)
# per pass (pass 0 warms the page cache), and the medians of the later
# passes, with each against webdataset's.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(dirname "$HERE")
source "$HERE/lib-bench.sh"
BUILD=$(cd "${1:-build}" && pwd)
WORKERS=${2:-2}
IMAGES=${3:-1024}
MODE=${4:-images}
[[ $MODE == images || $MODE == captions ]] || { echo "bench-dataset.sh: MODE is images or captions, not $MODE" >&2; exit 1; }
PASSES=${WDS_BENCH_PASSES:-4}
PY=${WDS_BENCH_PYTHON:-}
if [[ -z $PY ]]; then # the first test venv with what this needs
  for p in "$HOME"/.cache/wds-test-venv/py*/bin/python; do
    if "$p" -c 'import torch, torchvision, webdataset' 2>/dev/null; then
      PY=$p
      break
    fi
  done
fi
[[ -n $PY ]] || { echo "bench-dataset.sh: no venv with torch, torchvision and webdataset (ctest -R python_tree makes one; or WDS_BENCH_PYTHON)" >&2; exit 1; }
bench_check_devnull bench-dataset.sh
DATA=$BUILD/bench-dataset
WDS=$BUILD/tools/wds
if [[ ! -f $DATA/done-$IMAGES ]]; then
  rm -rf "$DATA" && mkdir -p "$DATA/files"
  /usr/bin/python3 "$SRC/scripts/gen-photo-jpegs.py" "$DATA/files" --count "$IMAGES" \
    --width 256 --height 256 --seed 1
  for f in "$DATA"/files/*.jpg; do
    k=$(basename "$f" .jpg)
    echo "a photo number $k of class $((10#$k % 10))" >"$DATA/files/$k.txt"
    echo "$((10#$k % 10))" >"$DATA/files/$k.cls"
  done
  "$WDS" write -o "$DATA/photos-%02d.tar" --maxcount $((IMAGES / 8)) "$DATA/files" >/dev/null
  touch "$DATA/done-$IMAGES"
fi
SPEC="$DATA/photos-{00..07}.tar"
"$WDS" index -o "$DATA/index.json" "$SPEC" >/dev/null
echo "# $IMAGES images 256x256, $MODE, batch 64, $WORKERS DataLoader workers, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
out=$(cd "$BUILD" && OMP_NUM_THREADS=1 PYTHONPATH="$BUILD/python" \
  "$PY" "$SRC/python/bench/dataset_pipeline.py" "$SPEC" "$DATA/index.json" "$WORKERS" "$PASSES" "$MODE" 2>&1 |
  grep -v -i warn)
echo "$out"
unit=$([[ $MODE == images ]] && echo images || echo samples)
ref_rate=$(grep "^webdataset pass" <<<"$out" | grep -v "pass 0:" | sed 's/.*: \([0-9.]*\) images\/s.*/\1/' | bench_median)
ref_cpu=$(grep "^webdataset pass" <<<"$out" | grep -v "pass 0:" | sed 's/.*cpu \([0-9.]*\) ms.*/\1/' | bench_median)
for way in wds.Dataset wds.WebDataset webdataset; do
  rows=$(grep "^$way pass" <<<"$out" | grep -v "pass 0:")
  med=$(sed 's/.*: \([0-9.]*\) images\/s.*/\1/' <<<"$rows" | bench_median)
  cpu=$(sed 's/.*cpu \([0-9.]*\) ms.*/\1/' <<<"$rows" | bench_median)
  printf 'median %s: %s %s/s (%.2fx webdataset), cpu %s ms/%s (webdataset / this: %.2fx)\n' \
    "$way" "$med" "$unit" "$(python3 -c "print($med / $ref_rate)")" "$cpu" "${unit%s}" \
    "$(python3 -c "print($ref_cpu / $cpu)")"
done
