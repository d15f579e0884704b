#!/usr/bin/env bash
# Interoperability test: wds against Python WebDataset 1.x.
#
# Makes (once, cached) a virtual environment with webdataset and numpy from
# the package index, then runs interop.py with it, which checks:
#   a. shards from `wds write` (directory tree, manifest; .tar, .tar.gz) read
#      by Python WebDataset give the input's samples, as `wds ls --json` does;
#   b. shards from WebDataset's ShardWriter/TarWriter read by wds (`wds ls
#      --json`, `wds cat`, `wds write` re-sharding) as Python reads them;
#   c. write -> index -> verify -> ls -> loader round trips on 4 layouts;
#   d. a `wds write` killed by SIGKILL leaves no truncated final shard;
#   e. `wds verify` catches planted defects and names shard and sample.
#
# Usage: interop.sh WDS_BINARY VENV_DIR WORK_DIR
#   VENV_DIR  the cached virtual environment (made when missing or stale)
#   WORK_DIR  parent of the temporary directory (removed on exit unless
#             WDS_TEST_KEEP is set)
# Environment: PYTHON3 (default python3; Debian's /usr/bin/python3 from
# CMake), PIP_INDEX_URL and the other PIP_* variables are passed to pip.
# Exit status: 0 all passed, 1 a failure, 77 skipped (no package index
# reachable and no cached environment), the SKIP_RETURN_CODE in CMake.
set -euo pipefail
export LC_ALL=C.UTF-8
export TZ=UTC
umask 022

SKIP=77
REQUIREMENTS=("webdataset>=1.0,<2" "numpy")

fail() {
  echo "FAIL setup: $*"
  echo "0 passed, 1 failed"
  exit 1
}

if (($# != 3)); then
  echo "usage: interop.sh WDS_BINARY VENV_DIR WORK_DIR" >&2
  exit 2
fi
WDS=$1 VENV=$2 WORK=$3
[[ $WDS == /* ]] || WDS=$PWD/$WDS
[[ -x $WDS ]] || fail "wds binary '$WDS' not found or not executable"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON3=${PYTHON3:-python3}
command -v "$PYTHON3" >/dev/null 2>&1 || fail "$PYTHON3 not found (apt-get install python3)"
mkdir -p "$WORK"

source "$HERE/../lib-venv.sh"
venv_ensure_shared "$VENV" "$PYTHON3" "webdataset, numpy" "${REQUIREMENTS[@]}"
"$VENV/bin/python" -c 'import webdataset, numpy, sys; from importlib.metadata import version; print("# python", sys.version.split()[0], "webdataset", version("webdataset"), "numpy", numpy.__version__)'

TMP=$(mktemp -d "$WORK/run.XXXXXX")
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [[ -n ${WDS_TEST_KEEP:-} ]]; then echo "# kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
rc=0
TMPDIR=$TMP "$VENV/bin/python" "$HERE/interop.py" "$WDS" "$TMP" || rc=$?
exit $rc
