#!/usr/bin/env bash
# symbols.sh — libwds.so exports the public API and nothing else:
# every defined dynamic symbol (nm -D --defined-only) is a function declared
# WDS_API in the public headers, and every such function is exported. So no
# internal wds__* name, no tool_/tr_ name, no dependency's symbol leaks, and
# no public declaration lacks its WDS_API.
# Usage: symbols.sh LIBWDS_SO INCLUDE_DIR... (the source tree's include/ and
# the build tree's, for the generated wds/version.h)
set -euo pipefail
export LC_ALL=C
lib=${1:?usage: symbols.sh LIBWDS_SO INCLUDE_DIR...}
shift
(($# >= 1)) || {
  echo "usage: symbols.sh LIBWDS_SO INCLUDE_DIR..." >&2
  exit 2
}
command -v nm >/dev/null || {
  echo "FAIL setup: nm not found (apt-get install binutils)"
  exit 1
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/wds-symbols.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Declared: "WDS_API <type> wds_name(" in the headers (comments and
# newlines between the mark and the name allowed), api.h itself aside.
headers=()
for d in "$@"; do
  for h in "$d"/wds/*.h; do
    [[ $(basename "$h") == api.h ]] || headers+=("$h")
  done
done
cat "${headers[@]}" | tr '\n' ' ' | grep -oE 'WDS_API [^;(]*\(' |
  grep -oE '\bwds_[A-Za-z0-9_]+ *\($' | tr -d ' (' | sort -u >"$tmp/declared"
# Exported: defined dynamic symbols, but the linker's own markers.
nm -D --defined-only "$lib" | awk 'NF >= 3 {print $3}' | sed 's/@.*//' |
  grep -vxE '_init|_fini|_edata|_end|__bss_start' | sort -u >"$tmp/exported"

fail=0
n=$(wc -l <"$tmp/declared")
if ((n < 50)); then
  echo "FAIL declared: only $n WDS_API functions found in $*"
  fail=1
fi
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
if [[ -n $extra ]]; then
  echo "FAIL exported but not declared WDS_API:"
  printf '    %s\n' $extra
  fail=1
fi
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
if [[ -n $missing ]]; then
  echo "FAIL declared WDS_API but not exported:"
  printf '    %s\n' $missing
  fail=1
fi
if grep -qE '^(wds__|tool_|tr_)' "$tmp/exported"; then
  echo "FAIL internal names exported:"
  grep -E '^(wds__|tool_|tr_)' "$tmp/exported" | sed 's/^/    /'
  fail=1
fi
if ((fail)); then
  exit 1
fi
echo "ok symbols: $(wc -l <"$tmp/exported") exported, all WDS_API, none missing"
