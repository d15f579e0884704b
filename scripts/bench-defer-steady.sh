#!/usr/bin/env bash
# Deferred reads in the steady state (docs/performance.md, "Issue 13 after
# session 22"). Usage:
#   [BEFORE=OTHER_BUILD_DIR] [RUNS=7] scripts/bench-defer-steady.sh [BUILD_DIR] [DATA_DIR]
# `wds bench 100k-0?.tar --decode bin --batch-size 256 --shuffle-buffer 10000
# --workers W --epochs 3 --warmup-epochs 1 --defer-reads D --json`, W = 1
# and 2, D = off and auto, this build and BEFORE's (if given), alternated;
# prints the median samples/s of RUNS runs per row, and every run's figure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
DATA=${2:-/tmp/wds-bench-data}
RUNS=${RUNS:-7}
PY=${PYTHON3:-/usr/bin/python3}
die() { echo "bench-defer-steady.sh: $*" >&2; exit 1; }
[ -x "$BUILD/tools/wds" ] || die "build first: $BUILD/tools/wds"
files=("$DATA"/100k-0?.tar)
[ -f "${files[0]}" ] || die "no $DATA/100k-0?.tar (scripts/bench-loader.sh writes them)"
[ -z "${BEFORE:-}" ] || [ -x "$BEFORE/tools/wds" ] || die "no $BEFORE/tools/wds"
cat "${files[@]}" >/dev/null
builds=(after)
[ -n "${BEFORE:-}" ] && builds+=(before)
declare -A v
for _ in $(seq "$RUNS"); do
  for w in 1 2; do
    for d in off auto; do
      for b in "${builds[@]}"; do
        bin=$BUILD/tools/wds
        [ "$b" = before ] && bin=$BEFORE/tools/wds
        s=$("$bin" bench "${files[@]}" --decode bin --batch-size 256 \
          --shuffle-buffer 10000 --workers "$w" --epochs 3 --warmup-epochs 1 \
          --defer-reads "$d" --json |
          "$PY" -c 'import json,sys; print(round(json.load(sys.stdin)["samples_per_s"]))')
        v[$w.$d.$b]="${v[$w.$d.$b]:-} $s"
      done
    done
  done
done
echo "== steady state, 100k set, 3 epochs after a warm-up, samples/s (medians of $RUNS alternated runs)"
for k in $(printf '%s\n' "${!v[@]}" | sort); do
  IFS=. read -r w d b <<<"$k"
  med=$(printf '%s\n' ${v[$k]} | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf 'workers=%s defer=%-4s %-6s %7s   [%s ]\n' "$w" "$d" "$b" "$med" "${v[$k]}"
done
