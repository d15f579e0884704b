#!/usr/bin/env bash
# Builds every fuzz target (tests/fuzz/fuzz_*.c but fuzz_replay, ctest's
# replayer) as a libFuzzer binary (clang, -DWDS_FUZZ=ON: ASan+UBSan, in
# build-fuzz/) and runs each for MINUTES minutes (a fraction allowed), one
# after the other, from its seed corpus (tests/fuzz/corpus/NAME, read only,
# and the extra seeds ctest replays too: decode's for npy, the shared test
# shards for reader; what the run finds goes to build-fuzz/fuzz-work/NAME),
# then prints one line per target: its executions, execs/s, the files in
# its work corpus and whether it found a crash (the reproducer then in
# build-fuzz/fuzz-work/, named TARGET-crash-*/-leak-*/-timeout-*, the log
# TARGET.log beside it; add it to tests/fuzz/corpus/NAME once fixed: ctest
# replays the corpus).
#
#   scripts/fuzz.sh MINUTES [TARGET...]    e.g. scripts/fuzz.sh 20
#
# Environment: FUZZ_BUILD (build directory, default build-fuzz), FUZZ_JOBS
# (build jobs, default 2), FUZZ_RSS_MB (per-target memory limit, default
# 2048). Exit status 1 when a target crashed, leaked or timed out.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
minutes=${1:?usage: scripts/fuzz.sh MINUTES [TARGET...]}
shift
[[ $minutes =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "fuzz.sh: MINUTES must be a number, not '$minutes'" >&2; exit 2; }
seconds=$(awk -v m="$minutes" 'BEGIN { s = int(m * 60 + 0.5); print s < 1 ? 1 : s }')
build=${FUZZ_BUILD:-$root/build-fuzz}
cc=$(command -v clang-14 || command -v clang || true)
[[ -n $cc ]] || { echo "fuzz.sh: clang not found (apt-get install clang)" >&2; exit 1; }

if (($# > 0)); then
  targets=("$@")
else
  targets=()
  for f in "$root"/tests/fuzz/fuzz_*.c; do
    t=$(basename "$f" .c)
    [[ $t == fuzz_replay ]] || targets+=("$t")
  done
fi

mkdir -p "$build"
if [[ ! -f $build/CMakeCache.txt ]]; then
  CC=$cc cmake -S "$root" -B "$build" -DWDS_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug \
    -DWDS_WITH_CUDA=OFF -DWDS_PYTHON=OFF >"$build/fuzz-configure.log" 2>&1 ||
    { cat "$build/fuzz-configure.log" >&2; exit 1; }
fi
cmake --build "$build" -j"${FUZZ_JOBS:-2}" --target "${targets[@]}" >"$build/fuzz-build.log" 2>&1 ||
  { tail -30 "$build/fuzz-build.log" >&2; exit 1; }

work=$build/fuzz-work
mkdir -p "$work"
failed=0
results=()
for t in "${targets[@]}"; do
  name=${t#fuzz_}
  seeds=("$root/tests/fuzz/corpus/$name")
  case $name in # the extra seed directories ctest replays too
    npy) seeds+=("$root/tests/fuzz/corpus/decode") ;;
    reader) [[ -d $root/../shared/testdata/webdataset ]] &&
      seeds+=("$root/../shared/testdata/webdataset") ;;
  esac
  existing=()
  for s in "${seeds[@]}"; do [[ -d $s ]] && existing+=("$s"); done
  mkdir -p "$work/$name"
  echo "== $t: $seconds s" >&2
  rc=0
  (cd "$work" && "$build/tests/$t" -max_total_time="$seconds" -print_final_stats=1 \
    -timeout=30 -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -artifact_prefix="$work/$t-" \
    "$work/$name" "${existing[@]}") >"$work/$t.log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/$t.log" | tail -1)
  units=$(find "$work/$name" -type f | wc -l)
  verdict=ok
  if ((rc != 0)); then
    verdict="FOUND A PROBLEM (exit $rc; see $work/$t.log)"
    failed=1
  fi
  results+=("$(printf '%-20s %12s runs %8s/s  %6s new corpus files  %s' "$t" "${execs:-?}" "${rate:-?}" "$units" "$verdict")")
done
printf '%s\n' "${results[@]}"
exit "$failed"
