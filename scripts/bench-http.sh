#!/usr/bin/env bash
# HTTP benchmarks (docs/performance.md, "HTTP in process"). Usage:
#   [RUNS=5] scripts/bench-http.sh [BUILD_DIR] [DATA_DIR]
# Starts nginx on a loopback port serving DATA_DIR (made with `wds synth`
# unless there), then, in one alternation per run, medians of RUNS:
#   1. big shards (8 x 200 samples of 100 KiB, each read 4 times: 670 MB):
#      `wds bench URLS`
#      (the reader over http:// in process) against `curl -s URLS
#      >/dev/null` (one curl process, its connection reused), as MB/s;
#      the target is wds >= 0.8 of curl;
#   2. 1,000 small shards (10 samples of 1 KiB each): `wds bench URLS`
#      (in process, connections reused) against `wds bench 'pipe:curl -s
#      URL'...` (one curl process per shard, the way before), as shards/s;
#   3. the shard cache (--cache-dir) on the big shards: epoch 1 filling an
#      empty cache against the same read without a cache (the cost of
#      writing it), and epoch 2 read from the cache against the local files
#      (`wds bench DATA/big/...`), as MB/s.
# Needs a Release build (scripts/setup.sh build-rel -DWDS_WITH_CUDA=OFF),
# nginx and curl.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
DATA=${2:-/tmp/wds-bench-http}
RUNS=${RUNS:-5}
WDS=$BUILD/tools/wds
die() { echo "bench-http.sh: $*" >&2; exit 1; }
source "$root/scripts/lib-bench.sh"
bench_check_devnull bench-http.sh
[ -x "$WDS" ] || die "build first: $WDS"
source "$root/scripts/lib-nginx.sh"
nginx_find || die "nginx not found (apt-get install nginx)"
command -v curl >/dev/null || die "curl not found (apt-get install curl)"

mkdir -p "$DATA/big" "$DATA/small"
[ -e "$DATA/big/b-7.tar" ] || "$WDS" synth --shards 8 --samples 200 --size 100K "$DATA/big/b-%d.tar" >/dev/null
[ -e "$DATA/small/s-0999.tar" ] || "$WDS" synth --shards 1000 --samples 10 --size 1K "$DATA/small/s-%04d.tar" >/dev/null
cat "$DATA"/big/*.tar "$DATA"/small/*.tar >/dev/null

TMP=$(mktemp -d /tmp/wds-bench-http.XXXXXX)
cleanup() {
  nginx_stop
  rm -rf "$TMP"
}
trap cleanup EXIT
nginx_start "$TMP" "$DATA" || die "nginx did not start"
port=$NGINX_PORT
B=http://127.0.0.1:$port

now() { date +%s.%N; }
secs() { # secs COMMAND...: wall seconds, output to /dev/null
  local t0 t1
  t0=$(now)
  "$@" >/dev/null 2>"$TMP/err" || die "failed: $* ($(head -c 300 "$TMP/err"))"
  t1=$(now)
  echo "$t1 - $t0" | bc -l
}
big=()
for _ in 1 2 3 4; do # each shard 4 times: longer runs, less noise
  for i in 0 1 2 3 4 5 6 7; do big+=("$B/big/b-$i.tar"); done
done
once=()
local=()
for i in 0 1 2 3 4 5 6 7; do once+=("$B/big/b-$i.tar"); done
for _ in 1 2 3 4; do
  for i in 0 1 2 3 4 5 6 7; do local+=("$DATA/big/b-$i.tar"); done
done
small=()
pipes=()
for i in $(seq -f %04g 0 999); do
  small+=("$B/small/s-$i.tar")
  pipes+=("pipe:curl -s $B/small/s-$i.tar")
done
mb=$((4 * $(du -cb "$DATA"/big/*.tar | tail -1 | cut -f1)))
: >"$TMP/r"
for r in $(seq "$RUNS"); do
  c=$(secs curl -s "${big[@]}")
  w=$(secs "$WDS" bench "${big[@]}")
  hs=$(secs "$WDS" bench "${small[@]}")
  ps=$(secs "$WDS" bench "${pipes[@]}")
  rm -rf "$TMP/cache"
  nf=$(secs "$WDS" bench "${once[@]}")
  cf=$(secs "$WDS" bench --cache-dir "$TMP/cache" "${once[@]}")
  lo=$(secs "$WDS" bench "${local[@]}")
  ch=$(secs "$WDS" bench --cache-dir "$TMP/cache" "${big[@]}")
  echo "$c $w $hs $ps $nf $cf $lo $ch" >>"$TMP/r"
  printf 'run %d: big curl %.3f s, wds %.3f s; 1000 small: in process %.3f s, pipe:curl %.3f s; cache: fill %.3f s (none %.3f s), hits %.3f s (local %.3f s)\n' "$r" "$c" "$w" "$hs" "$ps" "$cf" "$nf" "$ch" "$lo"
done
med() { awk -v k="$1" '{print $k}' "$TMP/r" | bench_median; }
c=$(med 1) w=$(med 2) hs=$(med 3) ps=$(med 4)
printf 'big shards (%d MB read): curl %.0f MB/s, wds over http %.0f MB/s: wds/curl %.2f (target: >= 0.8)\n' \
  $((mb / 1000000)) "$(echo "$mb / $c / 1000000" | bc -l)" "$(echo "$mb / $w / 1000000" | bc -l)" "$(echo "$c / $w" | bc -l)"
printf '1000 small shards: in process %.0f shards/s, pipe:curl %.0f shards/s: %.1fx\n' \
  "$(echo "1000 / $hs" | bc -l)" "$(echo "1000 / $ps" | bc -l)" "$(echo "$ps / $hs" | bc -l)"
nf=$(med 5) cf=$(med 6) lo=$(med 7) ch=$(med 8)
printf 'cache, epoch 1 (%d MB): without %.0f MB/s, filling --cache-dir %.0f MB/s: %.2f\n' \
  $((mb / 4000000)) "$(echo "$mb / 4 / $nf / 1000000" | bc -l)" "$(echo "$mb / 4 / $cf / 1000000" | bc -l)" "$(echo "$nf / $cf" | bc -l)"
printf 'cache, epoch 2 (%d MB): local files %.0f MB/s, from --cache-dir %.0f MB/s: %.2f\n' \
  $((mb / 1000000)) "$(echo "$mb / $lo / 1000000" | bc -l)" "$(echo "$mb / $ch / 1000000" | bc -l)" "$(echo "$lo / $ch" | bc -l)"
