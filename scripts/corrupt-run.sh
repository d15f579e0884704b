#!/usr/bin/env bash
# corrupt-run.sh — the corruption run of issue 34 at its full size: 1,000
# seeded iterations of random bit flips in plain, zstd and gzip shards (one
# frame or many), each read through the loader four ways (on_error stop and
# skip, with and without an index), failing if any valid row differs from
# the clean read. ctest runs the same program with 200 (test_corrupt).
#
# usage: scripts/corrupt-run.sh [BUILD_DIR] [ITERATIONS] [SEED]
#   BUILD_DIR   build holding tests/test_corrupt (default: build)
#   ITERATIONS  default 1000
#   SEED        default 34
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
exe=$build/tests/test_corrupt
[ -x "$exe" ] || { echo "corrupt-run.sh: $exe not built (cmake --build $build --target test_corrupt)" >&2; exit 2; }
exec "$exe" "${2:-1000}" "${3:-34}"
