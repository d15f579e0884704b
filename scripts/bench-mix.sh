#!/usr/bin/env bash
# What mixing sources costs (docs/performance.md, "Mixing shard sets"),
# in instructions (valgrind --tool=callgrind, deterministic) and wall time.
# Usage: [BEFORE=OTHER_BUILD_DIR] scripts/bench-mix.sh [BUILD_DIR] [DATA_DIR]
# (BEFORE: a build without sources, e.g. of the commit before them: its
# `wds` runs the two single-spec configurations too, as before_*)
#
# The same 16 synthetic shards (1,000 samples of 1 KB each) are read by
# `wds bench --decode bin --batch-size 256 --shuffle-buffer 1000
# --workers 2` in exact mode as one spec, as one --source and as two
# --source halves (repeat 1 each), and in resampled mode (16,000 samples per
# epoch) as one spec and as two --source halves (weights 1 and 1), and the
# instructions per sample of each are printed (callgrind counts every
# thread), with the median wall time of RUNS (default 5) alternated runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
DATA=${2:-/tmp/wds-bench-mix}
RUNS=${RUNS:-5}
WDS=$BUILD/tools/wds
die() { echo "bench-mix.sh: $*" >&2; exit 1; }
[ -x "$WDS" ] || die "build first: $WDS"
command -v valgrind >/dev/null || die "valgrind not found (apt-get install valgrind)"
mkdir -p "$DATA"
[ -f "$DATA/m-15.tar" ] ||
  "$WDS" synth --shards 16 --samples 1000 --size 1K --seed 1 "$DATA/m-%02d.tar" >/dev/null
N=16000
ALL="$DATA/m-{00..15}.tar"
A="$DATA/m-{00..07}.tar"
B="$DATA/m-{08..15}.tar"
common=(--decode bin --batch-size 256 --shuffle-buffer 1000 --workers 2)
declare -A cfg
cfg[exact_spec]="--mode exact $ALL"
cfg[exact_one_source]="--mode exact --source $ALL"
cfg[exact_two_sources]="--mode exact --source $A --source $B"
cfg[resampled_spec]="--mode resampled --samples-per-epoch $N $ALL"
cfg[resampled_two_sources]="--mode resampled --samples-per-epoch $N --source $A:weight=1 --source $B:weight=1"
names=(exact_spec exact_one_source exact_two_sources resampled_spec resampled_two_sources)
bins=()
for n in "${names[@]}"; do bins+=("$n=$WDS"); done
if [ -n "${BEFORE:-}" ]; then
  [ -x "$BEFORE/tools/wds" ] || die "no $BEFORE/tools/wds"
  cfg[before_exact_spec]=${cfg[exact_spec]}
  cfg[before_resampled_spec]=${cfg[resampled_spec]}
  names=(before_exact_spec "${names[@]}" before_resampled_spec)
  bins+=("before_exact_spec=$BEFORE/tools/wds" "before_resampled_spec=$BEFORE/tools/wds")
fi
bin_of() { local b; for b in "${bins[@]}"; do [ "${b%%=*}" = "$1" ] && echo "${b#*=}"; done; }
run() { # NAME: wds bench with that configuration
  # shellcheck disable=SC2086  # the configuration is words
  "$(bin_of "$1")" bench "${common[@]}" ${cfg[$1]}
}
cat "$DATA"/*.tar >/dev/null
printf '%-24s %14s %12s\n' config instr/sample wall_ms
declare -A wall
for ((r = 0; r < RUNS; r++)); do
  for n in "${names[@]}"; do
    t0=$(date +%s%N)
    run "$n" >/dev/null
    wall[$n]+="$((($(date +%s%N) - t0) / 1000000)) "
  done
done
for n in "${names[@]}"; do
  out=$(mktemp)
  # shellcheck disable=SC2086
  valgrind --tool=callgrind --callgrind-out-file="$out" -q "$(bin_of "$n")" bench "${common[@]}" \
    ${cfg[$n]} >/dev/null 2>&1
  ir=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  rm -f "$out"
  med=$(tr ' ' '\n' <<<"${wall[$n]}" | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  printf '%-24s %14s %12s\n' "$n" "$((ir / N))" "$med"
done
