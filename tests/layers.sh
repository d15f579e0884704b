#!/usr/bin/env bash
# layers.sh — the one-way module dependencies (base <- shards <- pipeline
# <- loader <- trainer, tools; docs/architecture.md), checked on the
# #include lines of the sources: a module may not include a header of a
# module above it, internal or public. Also the loader's lock discipline
# (its mutex taken only through the owner-tracked helpers) and the narrow
# views of its feeds, counting pass and sources.
# Usage: layers.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: layers.sh SOURCE_DIR}
bad=0

# forbid DIR REGEX WHY [EXCLUDE]: no file under DIR (but EXCLUDE, a file
# name) includes a header matching REGEX.
forbid() {
  local dir=$1 re=$2 why=$3 exclude=${4:-} hits
  hits=$(grep -rnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]($re)" \
           "$root/$dir" --include='*.c' --include='*.h' --include='*.cu' \
           ${exclude:+--exclude="$exclude"} || true)
  if [ -n "$hits" ]; then
    echo "layers: $dir/ includes $why:"
    echo "$hits" | sed "s|^$root/|  |"
    bad=1
  fi
}

forbid base 'shards/|pipeline/|loader/|trainer/|tools/|wds/(spec|reader|writer|index|decode|loader)\.h' \
  'a header of a module above it (base/ uses only wds/status.h, version.h, api.h)'
forbid shards 'pipeline/|loader/|trainer/|tools/|wds/(reader|index|decode|loader)\.h' \
  'a header of a module above it'
# The decode vocabulary is wds/decode.h, below the loader.
forbid pipeline 'wds/loader\.h|wds/index\.h|loader/|trainer/|tools/' \
  'a loader header or one above it (use wds/decode.h)'
forbid loader 'trainer/|tools/' 'a header of the trainer or the tools'
# wds-train's main.c is a command like the tools and shares their signal
# handling; the trainer's library does not include tools/.
forbid trainer 'tools/' 'a tools header' main.c
forbid tools 'trainer/' 'a trainer header'
# The Python extension is written over the public API (include/wds/) only.
forbid python 'base/|shards/|pipeline/|loader/|trainer/|tools/' \
  'an internal header (the extension uses the public API, include/wds/, only)'

# The loader's mutex is taken through wds__loader_lock, _unlock, _wait and
# _timedwait (loader/handle.h), so that assertion builds know its owner
# (WDS__ASSERT_LOCKED in loader/handle.h, over base/assert.h's
# WDS__ASSERT_OWNED): no other file locks or waits on
# l->mu raw.
hits=$(grep -rnE "pthread_(mutex_(lock|trylock|unlock)|cond_(timed)?wait)\(&([a-z_]+->)*l->(mu|cv)\b" \
         "$root/loader" --include='*.c' --include='*.h' --exclude=handle.h || true)
if [ -n "$hits" ]; then
  echo "layers: the loader's mutex taken raw (use wds__loader_lock and friends):"
  echo "$hits" | sed "s|^$root/|  |"
  bad=1
fi

# The feeds and the counting pass read the loader through their context
# structs (wds__feed_ctx, wds__count_ctx), and mix.c's sources part works
# on a wds__sources: the compiler keeps them to it, as struct wds_loader is
# in loader/handle.h, which feed.c, count.c and mix.c do not include (nor
# does any loader header: checked here), so a use of the handle's fields
# there does not compile.
hits=$(grep -n '#include "loader/handle.h"' "$root/loader/feed.c" "$root/loader/count.c" \
         "$root/loader/mix.c" "$root"/loader/*.h || true)
if [ -n "$hits" ]; then
  echo "layers: feed.c, count.c and mix.c (and the loader's headers) must not include loader/handle.h:"
  echo "$hits" | sed "s|^$root/|  |"
  bad=1
fi

if [ "$bad" -ne 0 ]; then
  echo "layers: FAILED"
  exit 1
fi
echo "layers: ok"
