#!/usr/bin/env bash
# bench-write.sh — `wds write` from a directory against `tar -cf` (the
# target: >= 0.8 of tar's throughput), for docs/performance.md.
#
# usage: scripts/bench-write.sh [BUILD_DIR] [DATA_DIR]
#   BUILD_DIR  CMake build directory holding tools/wds (default: build)
#   DATA_DIR   where the input directory is generated (default:
#              ${TMPDIR:-/tmp}/wds-bench-write); kept between runs and only
#              regenerated when missing or incomplete
# environment: RUNS (timed pairs, default 5), OUT_DIR (where outputs go,
#              default ${TMPDIR:-/tmp}: the same filesystem for both)
#
# Input: 10,000 files of 100 KB (102400 bytes of random data, one sample of
# one field each: f00000.bin ... f09999.bin) in DATA_DIR/files. The page
# cache is warmed by reading them all once, then `tar -cf OUT.tar -C DIR .`
# and `wds write --no-sync -o OUT-%06d.tar DIR` (default --maxcount/--maxsize:
# one shard; --no-sync because tar -cf does not fsync either: like with like)
# are timed alternately, RUNS times each, outputs deleted (and
# `sync`ed) between runs. Printed: the median time and throughput (input MB / s) of each,
# and the median of the per-pair ratios tar time / wds time (the throughput
# ratio of wds to tar; >= 0.8 is the target, > 1 means wds is faster).
set -euo pipefail

BUILD_DIR=${1:-build}
DATA_DIR=${2:-${TMPDIR:-/tmp}/wds-bench-write}
RUNS=${RUNS:-5}
OUT_DIR=${OUT_DIR:-${TMPDIR:-/tmp}}
WDS=$BUILD_DIR/tools/wds
NFILES=10000
SIZE=102400

die() { echo "bench-write.sh: $*" >&2; exit 1; }
source "$(dirname "$0")/lib-bench.sh"
bench_check_devnull bench-write.sh
[ -x "$WDS" ] || die "no wds binary at $WDS (build first, or pass BUILD_DIR)"
for tool in tar python3; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

SRC=$DATA_DIR/files
if [ "$(find "$SRC" -name '*.bin' -size ${SIZE}c 2>/dev/null | wc -l)" -ne $NFILES ]; then
  echo "# generating $NFILES files of $SIZE bytes in $SRC"
  rm -rf "$SRC"
  mkdir -p "$SRC"
  python3 - "$SRC" $NFILES $SIZE <<'EOF'
import os, sys
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    with open(os.path.join(d, "f%05d.bin" % i), "wb") as f:
        f.write(os.urandom(size))
EOF
fi

WORK=$(mktemp -d "$OUT_DIR/wds-bench-write.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# Warm the page cache (input), twice to be sure.
cat "$SRC"/* >/dev/null
cat "$SRC"/* >/dev/null
sync

now() { date +%s.%N; }
time_cmd() { # prints seconds
  local t0 t1
  t0=$(now)
  "$@" >/dev/null
  t1=$(now)
  python3 -c "print(f'{$t1 - $t0:.4f}')"
}

mb=$(python3 -c "print($NFILES * $SIZE / 1e6)")
echo "# input: $NFILES files x $SIZE bytes = $mb MB; outputs in $WORK"
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
tars=() wdss=() ratios=()
for i in $(seq "$RUNS"); do
  t=$(time_cmd tar -cf "$WORK/out.tar" -C "$SRC" .)
  rm -f "$WORK/out.tar"
  sync # no writeback of one run left to slow the next
  w=$(time_cmd "$WDS" write --no-sync -o "$WORK/out-%06d.tar" "$SRC")
  rm -f "$WORK"/out-*.tar
  sync
  r=$(python3 -c "print(f'{$t / $w:.3f}')")
  echo "run $i: tar -cf ${t}s, wds write ${w}s, ratio (tar time / wds time) $r"
  tars+=("$t") wdss+=("$w") ratios+=("$r")
done

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
mt=$(median "${tars[@]}")
mw=$(median "${wdss[@]}")
mr=$(median "${ratios[@]}")
printf 'tar -cf:   median %.3f s, %.0f MB/s\n' "$mt" "$(python3 -c "print($mb / $mt)")"
printf 'wds write: median %.3f s, %.0f MB/s\n' "$mw" "$(python3 -c "print($mb / $mw)")"
printf 'throughput ratio wds/tar (median of per-pair ratios): %s (target >= 0.8)\n' "$mr"
