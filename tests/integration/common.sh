#!/usr/bin/env bash
# common.sh — set-up shared by the integration scripts (sourced, not run).
#
#   source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
#   wds_test_setup NAME "TOOL..." "$@"
#
# Sets WDS (absolute path of the binary, from $1), HERE (this folder),
# PYTHON3 (the real interpreter), GTAR (GNU tar), passed=0 and failed=0;
# checks that every TOOL is installed (a missing one fails the test, it does
# not skip it); makes a temporary directory (TMP), removed on exit unless
# WDS_TEST_KEEP is set, and changes into it. die MESSAGE fails the set-up.
# Sourcing it sets LC_ALL=C.UTF-8, TZ=UTC and umask 022, and defines the
# check helpers below (ok, bad, w, expect_rc, has, check).
# shellcheck disable=SC2034  # the variables set here are used by the sourcing scripts
set -euo pipefail
export LC_ALL=C.UTF-8
export TZ=UTC
umask 022

die() {
  echo "FAIL setup: $*"
  echo "${passed:-0} passed, $((${failed:-0} + 1)) failed"
  exit 1
}

wds_test_setup() {
  local name=$1 tools=$2
  shift 2
  if (($# < 1)); then
    echo "usage: $name.sh WDS_BINARY [SHARED_TESTDATA]" >&2
    exit 2
  fi
  passed=0
  failed=0
  WDS=$1
  [[ $WDS == /* ]] || WDS=$PWD/$WDS # the scripts change directory
  HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  PYTHON3=${PYTHON3:-python3}
  [[ -x $WDS ]] || die "wds binary '$WDS' not found or not executable"
  local tool
  for tool in $tools "$PYTHON3"; do
    command -v "$tool" >/dev/null 2>&1 ||
      die "required tool '$tool' not found (apt-get install tar libarchive-tools zstd xz-utils bzip2 python3)"
  done
  GTAR=
  local t
  for t in gtar tar; do
    if command -v "$t" >/dev/null 2>&1 && "$t" --version 2>/dev/null | grep -q 'GNU tar'; then
      GTAR=$t
      break
    fi
  done
  [[ -n $GTAR ]] || die "GNU tar not found (apt-get install tar)"
  # The real interpreter, not a version-manager shim: it starts many times.
  PYTHON3=$("$PYTHON3" -c 'import sys; print(sys.executable)')
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/wds-$name.XXXXXX")
  trap wds_test_cleanup EXIT
  trap 'exit 130' INT TERM
  cd "$TMP"
}

wds_test_cleanup() {
  if [[ -n ${WDS_TEST_KEEP:-} ]]; then echo "# kept $TMP"; else rm -rf "$TMP"; fi
}

# Check helpers shared by the tool tests: each prints `ok NAME` or
# `FAIL NAME` (with indented detail lines) and counts into passed/failed.
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() {
  echo "FAIL $1"
  shift
  local line
  for line in "$@"; do printf '    %s\n' "$line"; done
  failed=$((failed + 1))
}
# w OUT ARGS...: `wds ARGS` into OUT.out / OUT.err, its status in RC, killed
# after W_TIMEOUT seconds (default 120).
RC=0
w() {
  local out=$1
  shift
  RC=0
  timeout "${W_TIMEOUT:-120}" "$WDS" "$@" >"$out.out" 2>"$out.err" || RC=$?
}
# expect_rc NAME WANT OUT: the last w's status is WANT.
expect_rc() {
  if [[ $RC == "$2" ]]; then ok "$1"; else bad "$1" "exit $RC, wanted $2" "$(head -c 600 "$3.err")"; fi
}
# has NAME FILE TEXT: FILE contains TEXT (fixed string).
has() {
  if grep -qF -- "$3" "$2"; then ok "$1"; else bad "$1" "no '$3' in $2:" "$(head -c 600 "$2")"; fi
}
# check NAME COMMAND...: ok when the command succeeds.
check() {
  local name=$1
  shift
  if "$@"; then ok "$name"; else bad "$name" "failed: $*"; fi
}
