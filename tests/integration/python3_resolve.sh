#!/usr/bin/env bash
# Tool test: the tests' python3 is chosen when they run (tests/python3.in),
# not fixed when CMake configured the build: this guards a build tree run on
# a machine whose python3 lives elsewhere, where every Python-using test
# failed with "required tool ... not found".
#
#   * the wrapper runs the configured interpreter while it exists;
#   * configured one missing: python3 on PATH; none at all: exit 127 and a
#     message naming both and WDS_PYTHON3;
#   * WDS_PYTHON3 set: that one, whatever was configured; a bad one is named;
#   * every test of this build tree (ctest --show-only=json-v1) that runs
#     python, or gets PYTHON3 / WDS_S3_PYTHON, gets a wrapper, never a fixed
#     interpreter path.
#
# Usage: python3_resolve.sh WRAPPER CONFIGURED MISSING_WRAPPER BUILD_DIR
set -euo pipefail
if (($# != 4)); then
  echo "usage: python3_resolve.sh WRAPPER CONFIGURED MISSING_WRAPPER BUILD_DIR" >&2
  exit 2
fi
WRAP=$1 CONFIGURED=$2 MISSING=$3 BUILD=$4
passed=0
failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1${2:+: $2}"; failed=$((failed + 1)); }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/wds-python3.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
unset WDS_PYTHON3
exe='import sys; print(sys.executable)'

got=$("$WRAP" -c "$exe")
if [ -x "$CONFIGURED" ]; then
  want=$("$CONFIGURED" -c "$exe")
  if [ "$got" = "$want" ]; then ok "configured interpreter while it exists: $got"; else bad "configured" "$got != $want"; fi
else # a build tree run elsewhere (scripts/gpu-run.sh)
  want=$(python3 -c "$exe")
  if [ "$got" = "$want" ]; then ok "configured $CONFIGURED gone: python3 on PATH, $got"; else bad "configured gone" "$got != $want"; fi
fi

# The configured interpreter gone: python3 on PATH (here a stand-in).
mkdir -p "$TMP/bin"
printf '#!/bin/sh\necho "stand-in python3 $*"\n' >"$TMP/bin/python3"
chmod +x "$TMP/bin/python3"
got=$(PATH="$TMP/bin:$PATH" "$MISSING" -c pass 2>&1) || true
if [ "$got" = "stand-in python3 -c pass" ]; then ok "configured one missing: python3 on PATH"; else bad "configured missing" "$got"; fi
got=$(PATH="$(dirname "$CONFIGURED"):$PATH" "$MISSING" -c "$exe" 2>&1) || true
if [ -n "$got" ] && [ -x "$got" ]; then ok "configured one missing: the real python3 on PATH ($got)"; else bad "configured missing, real" "$got"; fi

# Nothing at all: a clear message, exit 127.
rc=0
got=$(PATH="$TMP/empty" /bin/sh "$MISSING" -c pass 2>&1) || rc=$?
if ((rc == 127)) && [[ $got == *"/nonexistent/"*"python3 on PATH"*"WDS_PYTHON3"* ]]; then
  ok "no python3 anywhere: exit 127, says what it looked for"
else
  bad "no python3 anywhere" "rc $rc: $got"
fi

# WDS_PYTHON3 wins, over the configured one and PATH.
got=$(WDS_PYTHON3="$TMP/bin/python3" "$WRAP" -V 2>&1) || true
if [ "$got" = "stand-in python3 -V" ]; then ok "WDS_PYTHON3 wins"; else bad "WDS_PYTHON3" "$got"; fi
rc=0
got=$(WDS_PYTHON3="$TMP/nope/python3" "$WRAP" -V 2>&1) || rc=$?
if ((rc == 127)) && [[ $got == *"WDS_PYTHON3=$TMP/nope/python3"* ]]; then ok "a bad WDS_PYTHON3 is named"; else bad "bad WDS_PYTHON3" "rc $rc: $got"; fi

# Every Python-using test of the build gets a wrapper.
(cd "$BUILD" && ctest --show-only=json-v1) >"$TMP/tests.json"
if out=$("$WRAP" - "$TMP/tests.json" <<'PY'
import json, os, sys
tests = json.load(open(sys.argv[1]))["tests"]
bad, seen = [], 0
def is_python(path):
    return os.path.basename(path).startswith("python3") or os.path.basename(path) == "python"
for t in tests:
    cmd = t.get("command") or []
    env = []
    for p in t.get("properties", []):
        if p["name"] == "ENVIRONMENT":
            env = p["value"]
    vals = [("command", cmd[0])] if cmd and is_python(cmd[0]) else []
    for e in env:
        k, _, v = e.partition("=")
        if k in ("PYTHON3", "WDS_S3_PYTHON"):
            vals.append((k, v))
    for what, v in vals:
        seen += 1
        if os.path.basename(v) not in ("python3", "python3-ext") or not os.path.dirname(v).endswith("tests") \
                or not open(v).read().startswith("#!/bin/sh\n# python3 for the tests"):
            bad.append(f"{t['name']}: {what} {v}")
print(f"{seen} interpreter uses")
if bad or seen < 10:
    print("\n".join(bad) or "too few")
    sys.exit(1)
PY
); then
  ok "every test's python3 is a wrapper: $out"
else
  bad "tests with a fixed python3" "$out"
fi

echo "$passed passed, $failed failed"
((failed == 0))
