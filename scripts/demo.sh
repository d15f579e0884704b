#!/usr/bin/env bash
# The main job: set up, build, generate a small demo shard set with wds's own
# writer, list a few samples and stream the whole set, printing samples/s and
# MB/s.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build
"$root/scripts/setup.sh" "$build"
wds=$build/tools/wds
data=$build/demo-data
rm -rf "$data" && mkdir -p "$data"
"$wds" synth --shards 8 --samples 1000 --size 16384 --seed 1 "$data/demo-%06d.tar"
echo "--- first samples:"
"$wds" ls "$data/demo-000000.tar" > "$data/listing.txt"
head -n 3 "$data/listing.txt"
echo "--- summary:"
"$wds" ls --summary "$data/demo-{000000..000007}.tar"
echo "--- streaming the set:"
"$wds" bench "$data/demo-{000000..000007}.tar"
