#!/usr/bin/env bash
# Loader benchmarks (docs/performance.md, "The loader"). Usage:
#   [BEFORE=OTHER_BUILD_DIR] [ONLY=cat|jpeg] scripts/bench-loader.sh [BUILD_DIR] [DATA_DIR]
# 0. Against cat: the whole process `wds bench FILES --decode bin
#    --batch-size 256 --shuffle-buffer 10000 --workers W --epochs 1` (one
#    epoch, raw bytes, start to exit) against `cat FILES >/dev/null`, page
#    cache warm, as throughput (the files' bytes over the wall time), W = 1
#    and 2, on the 100k and 1k sets. With BEFORE, the same wds command of
#    that build is run in the same alternation, and after/before is printed
#    too. ONLY=cat stops after this part.
# 1. No decode: the loader (plain mode, shuffle buffer 10,000, batches of 256
#    raw .bin fields, steady state after one warm-up epoch) against the
#    reader's sample stream (`wds bench` without loader options) over the
#    foundation's synthetic sets (scripts/bench-read.sh writes the same).
# 2. JPEG: decode + resize + center crop to 224 of photo-sized JPEGs
#    (scripts/gen-photo-jpegs.py: 500x375, quality 90) over the same files:
#    the bare loops of bench/jpeg_baseline.c (TurboJPEG's DCT-scaled decode
#    alone, --dct-only, and the loader's whole decoder), the loader with 1
#    worker against the DCT-scaled decode alone (target: >= 0.85), and 2
#    workers against 1 (>= 1.9x; N workers too where N = cores > 2). With
#    BEFORE, that build's loader is run in the same alternations (1 worker:
#    DCT-scaled decode, loader, before; then 2 workers, after and before).
#    ONLY=jpeg runs this part alone.
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
source "$root/scripts/lib-bench.sh"
bench_check_devnull bench-loader.sh
[ -x "$WDS" ] && [ -x "$BASE" ] || die "build first: $WDS, $BASE"
"$PY" -c 'import numpy, PIL' 2>/dev/null || die "$PY needs numpy and PIL (apt-get install python3-numpy python3-pil)"
bench_synth_sets "$WDS" "$DATA"
bench_photo_jpegs "$PY" "$root" "$DATA"
jpegs=$DATA/photo-jpegs
cat "$DATA"/*.tar "$jpegs"/*.tar "$jpegs"/*.jpg >/dev/null

median() { bench_median; }
field() { "$PY" -c "import json,sys; print(json.load(sys.stdin)$1)"; }

# pair REF_CMD... -- LOADER_CMD...: runs the two alternately RUNS times (so
# both see the same machine state) and prints the medians of the reference,
# the loader and the per-pair ratio. SCALE multiplies the reference (N x one
# thread).
pair() {
  local ref=() lod=() seen=0
  for a in "$@"; do
    if [ "$a" = "--" ]; then seen=1; elif [ $seen = 0 ]; then ref+=("$a"); else lod+=("$a"); fi
  done
  local rs=() ls=() qs=()
  for _ in $(seq "$RUNS"); do
    local r l
    r=$("${ref[@]}")
    l=$("${lod[@]}")
    rs+=("$r"); ls+=("$l")
    qs+=("$("$PY" -c "print($l / ($r * ${SCALE:-1}))")")
  done
  printf '%s %s %s\n' "$(printf '%s\n' "${rs[@]}" | median)" \
    "$(printf '%s\n' "${ls[@]}" | median)" "$(printf '%s\n' "${qs[@]}" | median)"
}
reader() { "$WDS" bench --json "$@" | field '["samples_per_s"]'; }
loader() { "$WDS" bench --json --warmup-epochs 1 "$@" | field '["samples_per_s"]'; }
base() { "$BASE" --json "$@" | field '["images_per_s"]'; }
ls "$jpegs"/*.jpg >"$jpegs/list.txt"

# rate CMD...: the files' MB per second of wall time of CMD (output dropped).
rate() {
  local t0 t1
  t0=$(date +%s%N)
  "$@" >/dev/null 2>&1 || die "failed: $*"
  t1=$(date +%s%N)
  "$PY" -c "print($bytes / 1e6 / (($t1 - $t0) / 1e9))"
}
# triple A -- B -- C: like pair, three commands alternated; prints the medians
# of A, B, C and of the ratios B/A, C/A and B/C.
triple() {
  local k=0
  local -a a b c
  for x in "$@"; do
    if [ "$x" = "--" ]; then k=$((k + 1)); else
      case $k in 0) a+=("$x") ;; 1) b+=("$x") ;; 2) c+=("$x") ;; esac
    fi
  done
  local ra=() rb=() rc=() q1=() q2=() q3=()
  for _ in $(seq "$RUNS"); do
    local x y z
    x=$("${a[@]}")
    y=$("${b[@]}")
    z=$("${c[@]}")
    ra+=("$x"); rb+=("$y"); rc+=("$z")
    q1+=("$("$PY" -c "print($y / $x)")")
    q2+=("$("$PY" -c "print($z / $x)")")
    q3+=("$("$PY" -c "print($y / $z)")")
  done
  local m
  for arr in ra rb rc q1 q2 q3; do
    m="$arr[@]"
    printf '%s ' "$(printf '%s\n' "${!m}" | median)"
  done
  echo
}
if [ "${ONLY:-}" != jpeg ]; then
echo "== against cat: whole process, one epoch, batch 256, shuffle 10000, raw bytes"
echo "   (medians of $RUNS alternating runs; throughput = the files' bytes / wall time)"
for set in 100k 1k; do
  files=("$DATA/$set"-*.tar)
  bytes=$(cat "${files[@]}" | wc -c)
  for w in 1 2; do
    wcmd=(bench "${files[@]}" --decode bin --batch-size 256 --shuffle-buffer 10000 --workers "$w" --epochs 1)
    if [ -n "${BEFORE:-}" ]; then
      read -r c n b qn qb qa < <(triple rate cat "${files[@]}" -- rate "$WDS" "${wcmd[@]}" \
        -- rate "$BEFORE/tools/wds" "${wcmd[@]}")
      printf '%s workers=%d  cat %.0f MB/s  wds %.0f MB/s (%.2f of cat)  before %.0f MB/s (%.2f of cat)  after/before %.2f\n' \
        "$set" "$w" "$c" "$n" "$qn" "$b" "$qb" "$qa"
    else
      read -r c n q < <(pair rate cat "${files[@]}" -- rate "$WDS" "${wcmd[@]}")
      printf '%s workers=%d  cat %.0f MB/s  wds %.0f MB/s  ratio %.2f\n' "$set" "$w" "$c" "$n" "$q"
    fi
  done
done
echo "   (targets: 100k >= 0.5 with 1 worker, >= 0.8 with 2; 1k >= 0.4 / >= 0.6)"
[ "${ONLY:-}" = cat ] && exit 0

echo "== no decode: loader (shuffle 10000, batch 256, raw .bin) vs reader sample stream"
echo "   (medians of $RUNS alternating runs: reference, loader, ratio)"
for set in 100k 1k; do
  spec="$DATA/$set-{00..$( [ $set = 100k ] && echo 03 || echo 01 )}.tar"
  for w in 1 2; do
    read -r r l q < <(pair reader "$spec" -- loader "$spec" --decode bin --batch-size 256 \
      --shuffle-buffer 10000 --workers $w --epochs 3)
    printf '%s workers=%d  reader %.0f samples/s  loader %.0f samples/s  ratio %.2f (target >= 0.8)\n' \
      "$set" "$w" "$r" "$l" "$q"
  done
done

fi # ONLY=jpeg

echo "== JPEG: decode + resize + center crop to 224 (2000 photos, 500x375 q90)"
echo "   (medians of $RUNS alternating runs: reference, subject, ratio)"
photos="$jpegs/photos-{00..03}.tar"
dct() { base --dct-only --size 224 --list "$jpegs/list.txt" "$@"; }
jload() { loader "$photos" --decode jpg:rgb:224,cls --batch-size 64 --epochs 1 "$@"; }
read -r d1 f1 r1 < <(pair dct --threads 1 -- base --threads 1 --size 224 --list "$jpegs/list.txt")
printf 'bare loops, 1 thread: DCT-scaled decode only %.0f images/s  decode + resize + crop %.0f images/s  ratio %.2f\n' \
  "$d1" "$f1" "$r1"
read -r b1 l1 q1 < <(pair dct --threads 1 -- jload --workers 1)
printf '1 worker:  DCT-scaled decode only %.0f images/s  loader %.0f images/s  ratio %.2f (target >= 0.85)\n' \
  "$b1" "$l1" "$q1"
read -r ln1 ln2 q2 < <(pair jload --workers 1 -- jload --workers 2)
printf '2 workers: loader %.0f images/s vs 1 worker %.0f  speedup %.2f (target >= 1.9)\n' \
  "$ln2" "$ln1" "$q2"
if [ -n "${BEFORE:-}" ]; then
  bload() { "$BEFORE/tools/wds" bench --json --warmup-epochs 1 "$photos" --decode jpg:rgb:224,cls \
    --batch-size 64 --epochs 1 "$@" | field '["samples_per_s"]'; }
  read -r d n b qn qb qa < <(triple dct --threads 1 -- jload --workers 1 -- bload --workers 1)
  printf 'before, 1 worker:  DCT-scaled decode only %.0f  loader %.0f (%.2f)  before %.0f (%.2f)  after/before %.2f\n' \
    "$d" "$n" "$qn" "$b" "$qb" "$qa"
  read -r n1 n2 b1 b2 < <(
    read -r a1 a2 qa < <(pair jload --workers 1 -- jload --workers 2)
    read -r c1 c2 qc < <(pair bload --workers 1 -- bload --workers 2)
    echo "$qa $qc $a2 $c2")
  printf 'before, 2 workers: speedup %.2f, before %.2f; 2 workers %.0f images/s, before %.0f\n' \
    "$n1" "$n2" "$b1" "$b2"
fi
if [ "$N" -gt 2 ]; then
  read -r _ lnn qn < <(SCALE=$N pair jload --workers 1 -- jload --workers "$N")
  printf '%d workers: loader %.0f images/s  ratio %.2f of %d x 1 worker\n' "$N" "$lnn" "$qn" "$N"
fi
