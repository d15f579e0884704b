#!/usr/bin/env bash
# The demo's steps, on an existing build (scripts/demo.sh sets up and builds
# first; the gpu test runs this with --device cuda).
#   1. write scikit-learn's handwritten digits (Debian's python3-sklearn; a
#      generated learnable set without it) as files, and into shards with
#      `wds write`;
#   2. check them (`wds verify`), index them (`wds index`), list a summary;
#   3. show the loader's first batches as rank 1 of 2 in exact mode;
#   4. train an MLP on them with `wds-train` (CPU backend, 2 ranks as
#      threads; the CUDA backend, every GPU, where built with CUDA and a GPU
#      is present) and print the held-out accuracy (README states what to
#      expect). Extra options go to wds-train (they win: given last); with
#      --device cuda among them the demo passes no --ranks (wds-train
#      refuses it there: the ranks are the GPUs, every one unless --gpus N).
# Usage: scripts/demo-run.sh BUILD_DIR [wds-train options]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: demo-run.sh BUILD_DIR [wds-train options]}" && pwd)
shift
wds=$build/tools/wds
train=$build/trainer/wds-train
data=${DEMO_DATA:-$build/demo-data}
rm -rf "$data" && mkdir -p "$data"
echo "--- the data set:"
# Debian's python3 first (python3-sklearn's digits); else $PYTHON3 or the
# python3 on PATH (make-digits.py needs only the standard library).
py=${PYTHON3:-python3}
[ -n "${PYTHON3:-}" ] || [ ! -x /usr/bin/python3 ] || py=/usr/bin/python3
"$py" "$root/scripts/make-digits.py" "$data/files"
"$wds" write -o "$data/digits-train-%04d.tar" --maxcount 300 "$data/files/train"
"$wds" write -o "$data/digits-eval-%04d.tar" "$data/files/eval"
train_spec="$data/digits-train-{0000..0004}.tar"
"$wds" verify --require png,cls "$train_spec" "$data/digits-eval-0000.tar"
"$wds" index "$train_spec" -o "$data/digits-train.index.json"
"$wds" ls --summary --index "$data/digits-train.index.json" "$train_spec"
echo "--- the loader, as rank 1 of 2 in exact mode: first batches (epoch, index, keys):"
"$wds" batches "$train_spec" --mode exact --index "$data/digits-train.index.json" \
  --world 2 --rank 1 --batch-size 4 --decode png:l:8,cls --shuffle-buffer 100 --seed 1 |
  sed -n 1,3p
echo "--- training (data-parallel: 2 CPU ranks, or every GPU):"
# --device auto (the default) ignores --ranks when it picks the GPUs.
ranks=(--ranks 2)
device=auto
for ((i = 1; i <= $#; i++)); do
  case ${!i} in
  --device=*) device=${!i#--device=} ;;
  --device) j=$((i + 1)) && device=${!j:-} ;;
  esac
done
[ "$device" = cuda ] && ranks=()
"$train" --train "$train_spec" --index "$data/digits-train.index.json" \
  --eval "$data/digits-eval-0000.tar" --image-size 8 --channels 1 "${ranks[@]}" \
  --batch-size 16 --epochs 15 --lr 0.05 --warmup-steps 20 --workers 2 --seed 1 \
  --log-every 100 --checkpoint "$data/digits.ckpt" --json "$data/train.jsonl" "$@"
