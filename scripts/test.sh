#!/usr/bin/env bash
# The whole test suite: set up and build (build-test), check the formatting
# (.clang-format), then run ctest three times — the plain build with
# warnings as errors, an AddressSanitizer+UBSan build (build-asan), and the
# threaded tests (label threads) under ThreadSanitizer (build-tsan) — and,
# beside the plain ctest (started after the plain build, waited for before
# the ASan build), the MPI tests (label mpi) in a small build against MPICH
# (scripts/test-mpich.sh, its output in build-mpich/test-mpich.log).
# GPU tests (label gpu) skip themselves, visibly, when no GPU is present.
# After each ctest run, every skipped test is listed with its reason
# (scripts/ctest-skips.py: the tests' "SKIP" lines) and the slowest tests
# with their times (scripts/ctest-times.py): a test that took more than
# 5 minutes fails the suite, whatever else passed. At the end, the time of
# each phase (setup and build, format, each ctest run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# Twice as many ctest slots as cores: most tests wait more than they
# compute; the busy ones take two slots each (PROCESSORS in
# tests/CMakeLists.txt).
jobs=$((2 * $(nproc)))
# phase NAME CMD...: CMD, its wall time kept for the summary at the end.
phase_names=() phase_secs=() too_slow=0
phase() {
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" || rc=$?
  phase_names+=("$name")
  phase_secs+=($((SECONDS - t0)))
  return $rc
}
phase_report() {
  local i total=0
  echo "test.sh: time of each phase:"
  for i in "${!phase_names[@]}"; do
    printf '  %-30s %4d:%02d\n' "${phase_names[$i]}" $((phase_secs[i] / 60)) $((phase_secs[i] % 60))
    # a phase run beside others (its name ends in "(beside)") adds no time
    [[ ${phase_names[$i]} == *"(beside)" ]] || total=$((total + phase_secs[i]))
  done
  printf '  %-30s %4d:%02d\n' "total" $((total / 60)) $((total % 60))
}
# (and the MPICH run beside, if a failure ended the suite before its wait)
mpich_pid=
trap 'phase_report; [[ -z $mpich_pid ]] || kill -- "-$mpich_pid" 2>/dev/null || true' EXIT
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
    python3 "$root/scripts/ctest-times.py" "$build/ctest-junit.xml" || too_slow=1
  fi
  return $rc
}
phase "plain: setup, build" "$root/scripts/setup.sh" "$root/build-test" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWDS_WERROR=ON
phase "format" "$root/scripts/check-format.sh"
# MPICH beside the plain ctest, which mostly waits: its time is its own
# phase's, marked (beside); its output once it is done.
mkdir -p "$root/build-mpich"
mpich_log=$root/build-mpich/test-mpich.log
mpich_t0=$SECONDS
setsid "$root/scripts/test-mpich.sh" "$root/build-mpich" >"$mpich_log" 2>&1 &
mpich_pid=$!
phase "plain: ctest" run_ctest "$root/build-test" -- --output-on-failure -j "$jobs"
mpich_rc=0
wait "$mpich_pid" || mpich_rc=$?
mpich_pid=
phase_names+=("mpich: build, ctest (beside)")
phase_secs+=($((SECONDS - mpich_t0)))
echo "test.sh: MPICH build and its MPI tests (scripts/test-mpich.sh, status $mpich_rc):"
sed 's/^/  mpich: /' "$mpich_log"
((mpich_rc == 0)) || { echo "test.sh: FAILED: the MPI tests against MPICH"; exit 1; }
phase "asan: setup, build" "$root/scripts/setup.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DWDS_WERROR=ON -DWDS_SANITIZE=ON
phase "asan: ctest" run_ctest "$root/build-asan" ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 -- --output-on-failure -j "$jobs"
# The threaded parts (the loader, its tools) once more under ThreadSanitizer.
phase "tsan: setup, build" "$root/scripts/setup.sh" "$root/build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWDS_WERROR=ON -DWDS_SANITIZE_THREAD=ON
phase "tsan: ctest" run_ctest "$root/build-tsan" TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  -- --output-on-failure -j "$jobs" -L threads
if ((too_slow)); then
  echo "test.sh: FAILED: a test took more than 5 minutes (TOO SLOW above)"
  exit 1
fi
echo "test.sh: plain, ASan+UBSan and TSan suites passed"
