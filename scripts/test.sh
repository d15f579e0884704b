#!/usr/bin/env bash
# The whole test suite: set up, check the formatting (.clang-format), then
# build and run ctest three times — a
# plain build with warnings as errors, an AddressSanitizer+UBSan build, and
# the threaded tests (label threads) under ThreadSanitizer.
# GPU tests (label gpu) skip themselves, visibly, when no GPU is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
"$root/scripts/setup.sh" "$root/build-test" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWDS_WERROR=ON
"$root/scripts/check-format.sh"
(cd "$root/build-test" && ctest --output-on-failure -j "$jobs")
"$root/scripts/setup.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DWDS_WERROR=ON -DWDS_SANITIZE=ON
(cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j "$jobs")
# The threaded parts (the loader, its tools) once more under ThreadSanitizer.
"$root/scripts/setup.sh" "$root/build-tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWDS_WERROR=ON -DWDS_SANITIZE_THREAD=ON
(cd "$root/build-tsan" && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
   ctest --output-on-failure -j "$jobs" -L threads)
echo "test.sh: plain, ASan+UBSan and TSan suites passed"
