#!/usr/bin/env bash
# The main job: set up (install what is missing, build), then the demo's
# steps in scripts/demo-run.sh: the digits written to shards, verified,
# indexed, read by the loader, and trained on with wds-train (README states
# the accuracy to expect).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
"$root/scripts/setup.sh" "$build"
"$root/scripts/demo-run.sh" "$build"
