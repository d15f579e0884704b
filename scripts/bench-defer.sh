#!/usr/bin/env bash
# Deferred reads (docs/performance.md, "Deferred reads"). Usage:
#   [BEFORE=OTHER_BUILD_DIR] [RUNS=5] scripts/bench-defer.sh [BUILD_DIR] [DATA_DIR]
# One epoch of the 100 KB set, `wds bench 100k-0?.tar --decode bin
# --batch-size 256 --shuffle-buffer 10000 --workers W --epochs 1`, W = 1 and
# 2, page cache warm, for each of: BEFORE's wds (if given), this build with
# --defer-reads off, and with auto (the default). Per row, medians over RUNS
# alternated runs of: wall seconds, task-clock ms, page faults (perf stat,
# when perf is there) and peak RSS (/usr/bin/time -v).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
DATA=${2:-/tmp/wds-bench-data}
RUNS=${RUNS:-5}
WDS=$BUILD/tools/wds
die() { echo "bench-defer.sh: $*" >&2; exit 1; }
[ -x "$WDS" ] || die "build first: $WDS"
[ -x /usr/bin/time ] || die "needs /usr/bin/time (apt-get install time)"
files=("$DATA"/100k-0?.tar)
[ -f "${files[0]}" ] || die "no $DATA/100k-0?.tar (scripts/bench-loader.sh writes them)"
cat "${files[@]}" >/dev/null
have_perf=0
perf stat -e page-faults true >/dev/null 2>&1 && have_perf=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# one NAME WDS EXTRA...: one run, appends "wall task_ms faults rss_mb" to
# $tmp/NAME.
one() {
  local name=$1 bin=$2
  shift 2
  local t0 t1
  t0=$(date +%s.%N)
  if [ $have_perf = 1 ]; then
    /usr/bin/time -v -o "$tmp/time" perf stat -x, -o "$tmp/perf" \
      -e page-faults,task-clock "$bin" bench "${files[@]}" --decode bin \
      --batch-size 256 --shuffle-buffer 10000 --epochs 1 "$@" >/dev/null
  else
    /usr/bin/time -v -o "$tmp/time" "$bin" bench "${files[@]}" --decode bin \
      --batch-size 256 --shuffle-buffer 10000 --epochs 1 "$@" >/dev/null
  fi
  t1=$(date +%s.%N)
  local rss faults=- task=-
  rss=$(awk -F: '/Maximum resident/ {print $2 / 1000}' "$tmp/time")
  if [ $have_perf = 1 ]; then
    faults=$(awk -F, '$3 == "page-faults" {print $1}' "$tmp/perf")
    task=$(awk -F, '$3 == "task-clock" {print $1}' "$tmp/perf")
  fi
  echo "$(echo "$t1 - $t0" | bc) $task $faults $rss" >>"$tmp/$name"
}

med() { # column of $tmp/NAME
  sort -g -k"$2" "$tmp/$1" | awk -v c="$2" '{v[NR] = $c} END {print v[int((NR + 1) / 2)]}'
}

echo "one epoch, 100k set ($(du -shc "${files[@]}" | tail -1 | cut -f1)), RUNS=$RUNS, medians"
printf '%-28s %8s %10s %10s %10s\n' "build, workers" "wall s" "task ms" "faults" "RSS MB"
for w in 1 2; do
  names=()
  for _ in $(seq "$RUNS"); do
    if [ -n "${BEFORE:-}" ]; then
      one "before-$w" "$BEFORE/tools/wds" --workers "$w"
    fi
    one "off-$w" "$WDS" --workers "$w" --defer-reads off
    one "auto-$w" "$WDS" --workers "$w"
  done
  [ -n "${BEFORE:-}" ] && names+=("before-$w")
  names+=("off-$w" "auto-$w")
  for n in "${names[@]}"; do
    printf '%-28s %8s %10s %10s %10s\n' "$n" "$(med "$n" 1)" "$(med "$n" 2)" \
      "$(med "$n" 3)" "$(med "$n" 4)"
  done
done
