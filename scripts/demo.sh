#!/usr/bin/env bash
# The main job: set up, build, then
#   1. write scikit-learn's handwritten digits (Debian's python3-sklearn; a
#      generated learnable set without it) as files, and into shards with
#      `wds write`;
#   2. check them (`wds verify`), index them (`wds index`), list a summary;
#   3. show the loader's first batches as rank 1 of 2 in exact mode;
#   4. train an MLP on them with `wds-train` (CPU backend, 2 ranks as
#      threads; the CUDA backend where built with CUDA and a GPU is present)
#      and print the held-out accuracy (README states what to expect).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
"$root/scripts/setup.sh" "$build"
"$root/scripts/demo-run.sh" "$build"
