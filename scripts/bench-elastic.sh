#!/usr/bin/env bash
# The cost of opening an elastic resume (docs/performance.md, "Elastic
# resume"). Usage: [SHARDS=10000] [SAMPLES=10] [RUNS=3]
#   scripts/bench-elastic.sh [BUILD_DIR] [DATA_DIR]
# Writes SHARDS shards of SAMPLES small samples (`wds synth`) and their
# index into DATA_DIR (default /tmp/wds-bench-elastic; kept for the next
# run), then times `wds batches --max-batches 1` (open, plan, first batch)
# on rank 0 of 6 (batch 24) with a shuffle buffer of 1000 in three ways,
# each without and with --index (six rows): a fresh start; a plain resume
# (the state of the same job, halfway through the epoch); an elastic resume
# of a state saved on 8 ranks of batch 32 halfway through the epoch
# (--resume-state). Prints the median wall time of RUNS runs per row. The
# page cache is warm (the files are read once before).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
DATA=${2:-/tmp/wds-bench-elastic}
SHARDS=${SHARDS:-10000}
SAMPLES=${SAMPLES:-10}
RUNS=${RUNS:-3}
WDS=$BUILD/tools/wds
die() { echo "bench-elastic.sh: $*" >&2; exit 1; }
[ -x "$WDS" ] || die "build first: $WDS"
mkdir -p "$DATA"
cd "$DATA"
last=$(printf 'e-%05d.tar' $((SHARDS - 1)))
if [ ! -f "$last" ]; then
  "$WDS" synth --shards "$SHARDS" --samples "$SAMPLES" --size 64 --seed 1 'e-%05d.tar' >/dev/null
fi
SPEC="e-{00000..$(printf '%05d' $((SHARDS - 1)))}.tar"
[ -f e.index.json ] || "$WDS" index "$SPEC" -o e.index.json >/dev/null
cat e-*.tar >/dev/null
total=$((SHARDS * SAMPLES))
# Halfway through the epoch on 8 ranks of batch 32.
half=$((total / 8 / 32 / 2))
B=(--decode cls --mode exact --seed 3 --shuffle-buffer 1000 --max-sample-bytes 65536 --workers 4)
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
timeit() { # prints seconds of `wds batches ARGS --max-batches 1`
  local t0 t1
  t0=$(date +%s.%N)
  "$WDS" batches "$@" --max-batches 1 >/dev/null
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}
printf '%s shards, %s samples; rank 0 of 6, batch 24, resumed from 8 ranks of 32 after %s batches\n' \
  "$SHARDS" "$total" "$half"
printf '%-34s %10s\n' "case" "median s"
for ix in "" "--index=e.index.json"; do
  tag=${ix:+, index}
  "$WDS" batches "$SPEC" "${B[@]}" $ix --world 8 --rank 0 --batch-size 32 \
    --max-batches "$half" --save-state st8.txt >/dev/null
  "$WDS" batches "$SPEC" "${B[@]}" $ix --world 6 --rank 0 --batch-size 24 \
    --max-batches "$half" --save-state st6.txt >/dev/null
  for c in fresh plain elastic; do
    case $c in
    fresh) extra=() ;;
    plain) extra=(--resume-state st6.txt) ;;
    elastic) extra=(--resume-state st8.txt) ;;
    esac
    m=$(for _ in $(seq "$RUNS"); do
      timeit "$SPEC" "${B[@]}" $ix --world 6 --rank 0 --batch-size 24 "${extra[@]}"
    done | median)
    printf '%-34s %10s\n' "$c$tag" "$m"
  done
done
