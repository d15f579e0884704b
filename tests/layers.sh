#!/usr/bin/env bash
# layers.sh — the one-way module dependencies (shards <- pipeline <- loader
# <- trainer), checked on the #include lines of the sources: a module may
# not include a header of a module above it.
# Usage: layers.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: layers.sh SOURCE_DIR}
bad=0

# forbid DIR REGEX WHY: no file under DIR includes a header matching REGEX.
forbid() {
  local dir=$1 re=$2 why=$3 hits
  hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]($re)" \
           "$root/$dir" --include='*.c' --include='*.h' --include='*.cu' || true)
  if [ -n "$hits" ]; then
    echo "layers: $dir/ includes $why:"
    echo "$hits" | sed "s|^$root/|  |"
    bad=1
  fi
}

# The decode vocabulary is wds/decode.h, below the loader.
forbid pipeline 'wds/loader\.h|loader/' 'a loader header (use wds/decode.h)'

if [ "$bad" -ne 0 ]; then
  echo "layers: FAILED"
  exit 1
fi
echo "layers: ok"
