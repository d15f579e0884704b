#!/usr/bin/env bash
# The whole test suite: set up, then build and run ctest twice — a plain
# build with warnings as errors, and an AddressSanitizer+UBSan build.
# GPU tests (label gpu) skip themselves, visibly, when no GPU is present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=$(nproc)
"$root/scripts/setup.sh" "$root/build-test" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWDS_WERROR=ON
(cd "$root/build-test" && ctest --output-on-failure -j "$jobs")
"$root/scripts/setup.sh" "$root/build-asan" -DCMAKE_BUILD_TYPE=Debug -DWDS_WERROR=ON -DWDS_SANITIZE=ON
(cd "$root/build-asan" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
   UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j "$jobs")
echo "test.sh: plain and sanitized suites passed"
