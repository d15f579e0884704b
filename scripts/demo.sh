#!/usr/bin/env bash
# The main job: set up, build, generate a small demo shard set with wds's own
# writer, list a few samples, stream the whole set (samples/s, MB/s), then run
# the loader as the two ranks of a data-parallel job (batches, samples/s).
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
echo "--- the loader, as rank 1 of 2 in exact mode: first batches (epoch, index, keys):"
"$wds" batches "$data/demo-{000000..000007}.tar" --mode exact --world 2 --rank 1 \
  --batch-size 4 --decode bin,cls --shuffle-buffer 100 --seed 1 | sed -n 1,3p
echo "--- the loader, every rank's share in turn (batches of 256, shuffle buffer 1000):"
for rank in 0 1; do
  "$wds" bench "$data/demo-{000000..000007}.tar" --mode exact --world 2 --rank $rank \
    --batch-size 256 --decode bin,cls --shuffle-buffer 1000 --seed 1 --workers 2
done
