#!/usr/bin/env bash
# Instruction counts of the JPEG path (docs/performance.md, "The loader",
# "JPEG: the resize"): deterministic where wall-clock figures on a shared
# machine are not. Usage:
#   scripts/callgrind-jpeg.sh [BUILD_DIR] [DATA_DIR]
# Runs under valgrind --tool=callgrind, over the first shard of
# scripts/bench-loader.sh's photo set (500 JPEGs, 500x375 q90; run that
# script once first to make it):
#   dct     wds_jpeg_baseline --dct-only (TurboJPEG's DCT-scaled decode
#           alone; the timed loop only, --toggle-collect=run_job)
#   bare    wds_jpeg_baseline (decode + resize + center crop 224; same)
#   loader  wds bench --decode jpg:rgb:224,cls --workers 1 (whole process)
# and prints each count, the resampling functions' share of the loader and
# the dct / loader ratio (the target, in time: >= 0.85).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
DATA=${2:-/tmp/wds-bench-data}
jpegs=$DATA/photo-jpegs
die() { echo "callgrind-jpeg.sh: $*" >&2; exit 1; }
source "$root/scripts/lib-bench.sh"
bench_check_devnull callgrind-jpeg.sh
command -v valgrind >/dev/null || die "needs valgrind (apt-get install valgrind)"
[ -x "$BUILD/tools/wds" ] && [ -x "$BUILD/bench/wds_jpeg_baseline" ] || die "build first: $BUILD"
[ -f "$jpegs/done" ] || die "no photo set in $jpegs: run scripts/bench-loader.sh $BUILD $DATA first"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -tf "$jpegs/photos-00.tar" | grep '\.jpg$' | wc -l >"$work/n"
# the shard holds the first n photos in name order
ls "$jpegs"/*.jpg | awk -v n="$(cat "$work/n")" 'NR <= n' >"$work/list.txt"
ir() { # NAME CMD...: prints the total instruction count
  local name=$1; shift
  valgrind --tool=callgrind --callgrind-out-file="$work/$name.out" "$@" >/dev/null 2>"$work/$name.err" ||
    die "$name failed: $(tail -3 "$work/$name.err")"
  sed -n 's/.*I *refs: *//p' "$work/$name.err" | tr -d ,
}
n=$(cat "$work/n")
dct=$(ir dct --toggle-collect=run_job "$BUILD/bench/wds_jpeg_baseline" --dct-only --list "$work/list.txt")
bare=$(ir bare --toggle-collect=run_job "$BUILD/bench/wds_jpeg_baseline" --list "$work/list.txt")
loader=$(ir loader "$BUILD/tools/wds" bench "$jpegs/photos-00.tar" --decode jpg:rgb:224,cls \
  --batch-size 64 --workers 1 --epochs 1)
resize=$(callgrind_annotate "$work/loader.out" 2>/dev/null |
  awk '/(horizontal|vertical|resample)/ {gsub(",", "", $1); s += $1} END {print s + 0}')
awk -v n="$n" -v d="$dct" -v b="$bare" -v l="$loader" -v r="$resize" 'BEGIN {
  printf "%d JPEGs, instructions per image (millions):\n", n
  printf "  DCT-scaled decode alone   %8.2f\n", d / n / 1e6
  printf "  bare decode+resize+crop   %8.2f\n", b / n / 1e6
  printf "  loader, 1 worker          %8.2f  (resampling %.2f = %.1f%%)\n", l / n / 1e6, r / n / 1e6, 100 * r / l
  printf "  DCT-scaled decode / loader = %.3f\n", d / l
}'
