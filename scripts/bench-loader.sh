#!/usr/bin/env bash
# Loader benchmarks (docs/performance.md, "The loader"). Usage:
#   scripts/bench-loader.sh [BUILD_DIR] [DATA_DIR]
# 1. No decode: the loader (plain mode, shuffle buffer 10,000, batches of 256
#    raw .bin fields, steady state after one warm-up epoch) against the
#    reader's sample stream (`wds bench` without loader options) over the
#    foundation's synthetic sets (scripts/bench-read.sh writes the same).
# 2. JPEG: decode + resize + center crop to 224 of photo-sized JPEGs
#    (scripts/gen-photo-jpegs.py: 500x375, quality 90), the loader against
#    the bare decode loop (bench/jpeg_baseline.c) over the same files, with
#    1 worker vs 1 thread, and N workers vs N threads (N = cores).
# Every figure is the median of RUNS (default 5) runs; ratios are taken
# between figures of the same run of this script.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
DATA=${2:-/tmp/wds-bench-data}
RUNS=${RUNS:-5}
WDS=$BUILD/tools/wds
BASE=$BUILD/bench/wds_jpeg_baseline
PY=${PYTHON3:-/usr/bin/python3}
N=$(nproc)
die() { echo "bench-loader.sh: $*" >&2; exit 1; }
[ -x "$WDS" ] && [ -x "$BASE" ] || die "build first: $WDS, $BASE"
"$PY" -c 'import numpy, PIL' 2>/dev/null || die "$PY needs numpy and PIL (apt-get install python3-numpy python3-pil)"
mkdir -p "$DATA"

synth() { # name shards samples size seed
  [ -f "$DATA/$1-00.tar" ] && [ "$(cat "$DATA/$1.loader-params" 2>/dev/null)" = "$*" ] && return
  "$WDS" synth --shards "$2" --samples "$3" --size "$4" --seed "$5" "$DATA/$1-%02d.tar" >/dev/null
  echo "$*" >"$DATA/$1.loader-params"
}
synth 100k 4 1000 102400 1
synth 1k 2 50000 1024 2

jpegs=$DATA/photo-jpegs
if [ ! -f "$jpegs/done" ]; then
  rm -rf "$jpegs"
  "$PY" "$root/scripts/gen-photo-jpegs.py" "$jpegs" --count 2000 --seed 1 >/dev/null
  # Pack into 4 shards of 500 samples (.jpg + .cls), sorted by name.
  "$PY" - "$jpegs" <<'PYEOF'
import io, os, sys, tarfile
d = sys.argv[1]
names = sorted(n for n in os.listdir(d) if n.endswith(".jpg"))
for s in range(4):
    with tarfile.open(os.path.join(d, f"photos-{s:02d}.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
        for i, n in enumerate(names[s * 500:(s + 1) * 500]):
            key = f"p{s}_{i:04d}"
            t.add(os.path.join(d, n), arcname=key + ".jpg")
            cls = str(i % 10).encode()
            ti = tarfile.TarInfo(key + ".cls"); ti.size = len(cls)
            t.addfile(ti, io.BytesIO(cls))
PYEOF
  touch "$jpegs/done"
fi
cat "$DATA"/*.tar "$jpegs"/*.tar "$jpegs"/*.jpg >/dev/null

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
field() { "$PY" -c "import json,sys; print(json.load(sys.stdin)$1)"; }

reader_sps() { for _ in $(seq "$RUNS"); do "$WDS" bench --json "$@" | field '["samples_per_s"]'; done | median; }
loader_sps() { for _ in $(seq "$RUNS"); do "$WDS" bench --json --warmup-epochs 1 "$@" | field '["samples_per_s"]'; done | median; }
base_ips() { for _ in $(seq "$RUNS"); do "$BASE" --json "$@" | field '["images_per_s"]'; done | median; }
ratio() { "$PY" -c "print(f'{$1 / $2:.2f}')"; }

echo "== no decode: loader (shuffle 10000, batch 256, raw .bin) vs reader sample stream"
for set in 100k 1k; do
  spec="$DATA/$set-{00..$( [ $set = 100k ] && echo 03 || echo 01 )}.tar"
  r=$(reader_sps "$spec")
  for w in 1 2; do
    l=$(loader_sps "$spec" --decode bin --batch-size 256 --shuffle-buffer 10000 --workers $w --epochs 3)
    echo "$set workers=$w  reader ${r} samples/s  loader ${l} samples/s  ratio $(ratio "$l" "$r")"
  done
done

echo "== JPEG: decode + resize + center crop to 224 (2000 photos, 500x375 q90)"
ls "$jpegs"/*.jpg >"$jpegs/list.txt"
b1=$(base_ips --threads 1 --size 224 --list "$jpegs/list.txt")
l1=$(loader_sps "$jpegs/photos-{00..03}.tar" --decode jpg:rgb:224,cls --batch-size 64 --workers 1 --epochs 1)
echo "1 thread:  baseline ${b1} images/s  loader ${l1} images/s  ratio $(ratio "$l1" "$b1") (target >= 0.9)"
bn=$(base_ips --threads "$N" --size 224 --list "$jpegs/list.txt")
ln=$(loader_sps "$jpegs/photos-{00..03}.tar" --decode jpg:rgb:224,cls --batch-size 64 --workers "$N" --epochs 1)
echo "$N threads: baseline ${bn} images/s  loader ${ln} images/s  loader/(N x 1-thread loader) $(ratio "$ln" "($N*$l1)") (target >= 0.8)"
