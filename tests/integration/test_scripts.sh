#!/usr/bin/env bash
# Tests of the test machinery:
#
#   * scripts/ctest-skips.py, which scripts/test.sh runs after each ctest:
#     a generated CMake project with a test that skips (exit 77, its reason
#     on a "SKIP:" line), one that skips without saying why, one that passes
#     with a skipped part, one that says why without "SKIP:" and one that
#     passes plainly; the list names the four, each with its reason, and
#     not the last; and tests/test.h's outcomes, compiled: a binary with a
#     SKIP() test and a RUN_IF whose condition fails (reported as
#     RUN_SKIPPED) among passing ones (counted in its
#     summary line, exit 0, listed with the count) and one whose every test
#     skips (exit 77: ctest says skipped);
#   * scripts/ctest-times.py, test.sh's check on the times: the slowest
#     tests listed, a failure for a test over the limit (5 minutes);
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
project(skips C)
enable_testing()
include_directories(${WDS_TESTS})
add_executable(units units.c)
add_executable(all_skip all_skip.c)
add_test(NAME units COMMAND units)
add_test(NAME all_skip COMMAND all_skip)
set_tests_properties(units all_skip PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME needs_gpu COMMAND sh -c "echo 'ok start'; echo 'SKIP: no GPU here'; exit 77")
add_test(NAME says_nothing COMMAND sh -c "exit 77")
add_test(NAME says_it_late COMMAND sh -c "echo 'ok start'; echo 'no GPU (nvidia-smi): skipped'; echo 'bye'; exit 77")
add_test(NAME part_skipped COMMAND sh -c "echo 'ok a'; echo 'SKIP: no network: the http part'")
add_test(NAME plain COMMAND sh -c "echo 'ok b'")
set_tests_properties(needs_gpu says_nothing says_it_late PROPERTIES SKIP_RETURN_CODE 77)
CM
cat >proj/units.c <<'C'
#include "test.h"
TEST(passes) { ASSERT_EQ_INT(1 + 1, 2); }
TEST(needs_two_gpus) {
  int gpus = 1;
  if (gpus < 2)
    SKIP("one GPU (%d): this test needs two", gpus);
  ASSERT_TRUE(0); /* not reached */
}
TEST(needs_curl) { ASSERT_TRUE(0); /* not run */ }
int main(void) {
  RUN(passes);
  RUN(needs_two_gpus);
  RUN_IF(0, needs_curl, "built without %s", "libcurl");
  return test_summary();
}
C
cat >proj/all_skip.c <<'C'
#include "test.h"
TEST(only) { SKIP("nothing to test here"); }
int main(void) {
  RUN(only);
  return test_summary();
}
C
"$CMAKE" -S proj -B proj/build -DWDS_TESTS="$SRC/tests" >/dev/null || die "cmake of the fixture project failed"
"$CMAKE" --build proj/build >build.out 2>&1 || die "the fixture's test.h binaries did not build: $(cat build.out)"
(cd proj/build && "$CTEST" --output-junit "$TMP/proj/build/junit.xml") >ctest.out 2>&1 ||
  die "ctest of the fixture failed: $(cat ctest.out)"
# A test that runs ctest in the same tree rewrites LastTest.log: the list
# comes from the JUnit file.
(cd proj/build && "$CTEST" -N) >/dev/null 2>&1
"$PYTHON3" "$SRC/scripts/ctest-skips.py" proj/build/junit.xml >skips.out
cat skips.out | sed 's/^/# /'
check "skips: counts the skipped" grep -q '^build: 4 tests skipped:$' skips.out
check "skips: a skipped test with its reason" grep -q '^  needs_gpu: SKIP: no GPU here$' skips.out
check "skips: a skipped test that printed nothing" grep -q '^  says_nothing: (the test printed nothing)$' skips.out
check "skips: a reason without SKIP:" grep -q '^  says_it_late: no GPU (nvidia-smi): skipped$' skips.out
check "skips: a part skipped" grep -q '^  part_skipped: SKIP: no network: the http part$' skips.out
check "skips: not the plain test" test -z "$(grep plain skips.out)"
check "skips: test.h, every test skipped: ctest says skipped" grep -q 'all_skip .*Skipped' ctest.out
check "skips: test.h's skipped binary listed" grep -q '^  all_skip: SKIP only: nothing to test here$' skips.out
check "skips: test.h's count of skipped tests" grep -q '^  units (2 of 3 skipped): SKIP needs_two_gpus: one GPU (1): this test needs two$' skips.out
check "skips: test.h's RUN_IF (RUN_SKIPPED)" grep -q '^  *: SKIP needs_curl: built without libcurl$' skips.out
rc=0
proj/build/units >units.out || rc=$?
check "skips: test.h's summary line" grep -q '^1 passed, 0 failed, 2 skipped$' units.out
check "skips: test.h, some tests skipped: exit 0" test $rc -eq 0
check "skips: test.h's line per test" test "$(grep -c '^ok   passes$\|^SKIP needs_' units.out)" -eq 3
(cd proj/build && "$CTEST" -R plain --output-junit "$TMP/proj/build/junit2.xml") >ctest2.out 2>&1
"$PYTHON3" "$SRC/scripts/ctest-skips.py" proj/build/junit2.xml build >skips2.out
check "skips: nothing skipped, nothing printed" test ! -s skips2.out

# ---- ctest-times.py ----
rc=0
"$PYTHON3" "$SRC/scripts/ctest-times.py" proj/build/junit.xml >times.out || rc=$?
check "times: a quick run passes" test $rc -eq 0
check "times: lists the slowest" grep -q '^build: the 7 slowest of 7 tests' times.out
cat >slow.xml <<'X'
<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="x" tests="3">
  <testcase name="quick" classname="quick" time="2.5" status="run"/>
  <testcase name="heavy" classname="heavy" time="301.2" status="run"/>
  <testcase name="medium" classname="medium" time="120" status="run"/>
</testsuite>
X
rc=0
"$PYTHON3" "$SRC/scripts/ctest-times.py" slow.xml >times2.out || rc=$?
check "times: a test over 5 minutes fails the run" test $rc -eq 1
check "times: it is named" grep -q '^TOO SLOW: heavy took 301 s (limit 300 s)$' times2.out
check "times: only it" test "$(grep -c 'TOO SLOW' times2.out)" -eq 1
check "times: slowest first" bash -c "sed -n 2p times2.out | grep -q heavy"
rc=0
"$PYTHON3" "$SRC/scripts/ctest-times.py" slow.xml --limit 400 >/dev/null || rc=$?
check "times: under a higher limit it passes" test $rc -eq 0

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
