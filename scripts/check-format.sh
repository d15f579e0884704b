#!/usr/bin/env bash
# Checks that every C, header and CUDA source in the tree is formatted as
# .clang-format says (clang-format 14, Debian 12's). With --fix, formats them
# in place instead. scripts/test.sh (and so CI) runs the check.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cf=$(command -v clang-format-14 || command -v clang-format || true)
[ -n "$cf" ] || { echo "check-format.sh: clang-format not found (apt-get install clang-format)" >&2; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu')
else
  mapfile -t files < <(find . -path './build*' -prune -o -path ./.venv -prune -o \
                         \( -name '*.c' -o -name '*.h' -o -name '*.cu' \) -print | sort)
fi
if [ "${1:-}" = "--fix" ]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$cf" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format.sh: ${#bad[@]} file(s) not formatted as .clang-format says:" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "run scripts/check-format.sh --fix (or clang-format -i FILE) and commit" >&2
  exit 1
fi
echo "check-format.sh: ${#files[@]} files formatted"
