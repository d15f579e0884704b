#!/usr/bin/env bash
# The whole test suite: set up, check the formatting (.clang-format), then
# build and run ctest three times — a
# plain build with warnings as errors, an AddressSanitizer+UBSan build, and
# the threaded tests (label threads) under ThreadSanitizer.
# GPU tests (label gpu) skip themselves, visibly, when no GPU is present.
# After each ctest run, every skipped test is listed with its reason
# (scripts/ctest-skips.py: the tests' "SKIP:" lines).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
# run_ctest BUILD_DIR [ENV=VALUE...] -- CTEST_ARGS...: ctest in BUILD_DIR
# (its results also in BUILD_DIR/ctest-junit.xml), then the skipped tests
# and why; ctest's status.
run_ctest() {
  local build=$1
  shift
  local envs=()
  while [[ $1 != -- ]]; do
    envs+=("$1")
    shift
  done
  shift
  local rc=0
  rm -f "$build/ctest-junit.xml"
  (cd "$build" && env "${envs[@]}" ctest --output-junit "$build/ctest-junit.xml" "$@") || rc=$?
  if [[ -f $build/ctest-junit.xml ]]; then
    python3 "$root/scripts/ctest-skips.py" "$build/ctest-junit.xml" || true
  fi
  return $rc
}
"$root/scripts/setup.sh" "$root/build-test" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWDS_WERROR=ON
"$root/scripts/check-format.sh"
run_ctest "$root/build-test" -- --output-on-failure -j "$jobs"
"$root/scripts/setup.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DWDS_WERROR=ON -DWDS_SANITIZE=ON
run_ctest "$root/build-asan" ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 -- --output-on-failure -j "$jobs"
# The threaded parts (the loader, its tools) once more under ThreadSanitizer.
"$root/scripts/setup.sh" "$root/build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWDS_WERROR=ON -DWDS_SANITIZE_THREAD=ON
run_ctest "$root/build-tsan" TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  -- --output-on-failure -j "$jobs" -L threads
echo "test.sh: plain, ASan+UBSan and TSan suites passed"
