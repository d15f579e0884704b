#!/usr/bin/env bash
# Tests of the test machinery (issue 25):
#
#   * scripts/ctest-skips.py, which scripts/test.sh runs after each ctest:
#     a generated CMake project with a test that skips (exit 77, its reason
#     on a "SKIP:" line), one that skips without saying why, one that passes
#     with a skipped part, one that says why without "SKIP:" and one that
#     passes plainly; the list names the four, each with its reason, and
#     not the last;
#   * tests/lib-venv.sh's venv_ensure_shared: two build trees' environments
#     over one shared environment (made once, under its lock, in
#     WDS_TEST_VENV_CACHE), each importing the shared packages through its
#     .pth file, while a package installed into one is not seen by the
#     other. Offline: the requirement is a wheel made here, given to pip
#     with --no-index and --find-links.
#
# Usage: test_scripts.sh WDS_BINARY SOURCE_DIR
# Environment: CMAKE, CTEST (default: from PATH), PYTHON3.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup test_scripts "flock sha256sum" "$@"
(($# == 2)) || die "usage: test_scripts.sh WDS SOURCE_DIR"
SRC=$2
CMAKE=${CMAKE:-cmake}
CTEST=${CTEST:-ctest}

# ---- ctest-skips.py ----
mkdir proj
cat >proj/CMakeLists.txt <<'CM'
cmake_minimum_required(VERSION 3.16)
project(skips NONE)
enable_testing()
add_test(NAME needs_gpu COMMAND sh -c "echo 'ok start'; echo 'SKIP: no GPU here'; exit 77")
add_test(NAME says_nothing COMMAND sh -c "exit 77")
add_test(NAME says_it_late COMMAND sh -c "echo 'ok start'; echo 'no GPU (nvidia-smi): skipped'; echo 'bye'; exit 77")
add_test(NAME part_skipped COMMAND sh -c "echo 'ok a'; echo 'SKIP: no network: the http part'")
add_test(NAME plain COMMAND sh -c "echo 'ok b'")
set_tests_properties(needs_gpu says_nothing says_it_late PROPERTIES SKIP_RETURN_CODE 77)
CM
"$CMAKE" -S proj -B proj/build >/dev/null || die "cmake of the fixture project failed"
(cd proj/build && "$CTEST" --output-junit "$TMP/proj/build/junit.xml") >ctest.out 2>&1 ||
  die "ctest of the fixture failed: $(cat ctest.out)"
# A test that runs ctest in the same tree rewrites LastTest.log: the list
# comes from the JUnit file.
(cd proj/build && "$CTEST" -N) >/dev/null 2>&1
"$PYTHON3" "$SRC/scripts/ctest-skips.py" proj/build/junit.xml >skips.out
cat skips.out | sed 's/^/# /'
check "skips: counts the skipped" grep -q '^build: 3 tests skipped:$' skips.out
check "skips: a skipped test with its reason" grep -q '^  needs_gpu: SKIP: no GPU here$' skips.out
check "skips: a skipped test that printed nothing" grep -q '^  says_nothing: (the test printed nothing)$' skips.out
check "skips: a reason without SKIP:" grep -q '^  says_it_late: no GPU (nvidia-smi): skipped$' skips.out
check "skips: a part skipped" grep -q '^  part_skipped: SKIP: no network: the http part$' skips.out
check "skips: not the plain test" test -z "$(grep plain skips.out)"
(cd proj/build && "$CTEST" -R plain --output-junit "$TMP/proj/build/junit2.xml") >ctest2.out 2>&1
"$PYTHON3" "$SRC/scripts/ctest-skips.py" proj/build/junit2.xml build >skips2.out
check "skips: nothing skipped, nothing printed" test ! -s skips2.out

# ---- venv_ensure_shared ----
mkdir wheels
"$PYTHON3" - wheels <<'PY'
import base64, hashlib, os, sys, zipfile
def wheel(name, version):
    files = {f"{name}/__init__.py": f"NAME = {name!r}\n",
             f"{name}-{version}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{name}-{version}.dist-info/WHEEL":
                 "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = f"{name}-{version}.dist-info/RECORD"
    lines = []
    for path, text in files.items():
        d = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={d},{len(text.encode())}")
    lines.append(f"{record},,")
    files[record] = "\n".join(lines) + "\n"
    with zipfile.ZipFile(os.path.join(sys.argv[1], f"{name}-{version}-py3-none-any.whl"), "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
wheel("wdsfake", "1.0")
wheel("wdsextra", "1.0")
PY
export PIP_NO_INDEX=1 PIP_FIND_LINKS=$TMP/wheels PIP_DISABLE_PIP_VERSION_CHECK=1
export WDS_TEST_VENV_CACHE=$TMP/cache
fail() {
  echo "FAIL venv: $*"
  exit 1
}
source "$SRC/tests/lib-venv.sh"
(venv_ensure_shared "$TMP/tree1/venv" "$PYTHON3" wdsfake wdsfake) >v1.out 2>&1 ||
  die "venv_ensure_shared (tree 1) failed: $(cat v1.out)"
(venv_ensure_shared "$TMP/tree2/venv" "$PYTHON3" wdsfake wdsfake) >v2.out 2>&1 ||
  die "venv_ensure_shared (tree 2) failed: $(cat v2.out)"
shared=$(find cache -mindepth 1 -maxdepth 1 -type d)
check "shared: one environment in the cache" test "$(echo "$shared" | wc -l)" -eq 1 -a -n "$shared"
check "shared: made once (tree 2 reused it)" test "$(cat v1.out v2.out | grep -c "making the virtual environment $TMP/cache/")" -eq 1
for t in tree1 tree2; do
  check "shared: $t imports the shared package" "$t/venv/bin/python" -c 'import wdsfake'
  check "shared: $t holds no copy of it" test -z "$(find "$t/venv" -name 'wdsfake*' -path '*site-packages*')"
done
tree1/venv/bin/python -m pip install -q wdsextra >/dev/null 2>&1 || die "pip install into tree 1 failed"
check "shared: a package installed in tree 1 is its own" tree1/venv/bin/python -c 'import wdsextra'
check "shared: tree 2 does not see it" bash -c '! tree2/venv/bin/python -c "import wdsextra" 2>/dev/null'
(venv_ensure_shared "$TMP/tree2/venv" "$PYTHON3" wdsfake wdsfake) >v3.out 2>&1
check "shared: an up-to-date tree is kept" test ! -s v3.out

echo "$passed passed, $failed failed"
((failed == 0))
