#!/usr/bin/env bash
# The Python package's pytest suite (python/tests/test_*.py), run by ctest.
#
# Makes (once, cached) a virtual environment with pytest, numpy and Python
# webdataset from the package index, then runs pytest with it, in one of two
# modes:
#   tree  the extension just built in the build tree (PYTHONPATH=BUILD/python)
#   pip   a real `pip wheel SRC` (scikit-build-core, the root pyproject.toml;
#         its CMake build kept in BUILD/pip-build so that re-runs are quick),
#         the wheel installed into the environment, and the suite run
#         against the installed package.
#   readme not pytest: tests/integration/readme.py (tools_readme's script)
#         with this environment's torch: README's torchrun command and the
#         blocks that need torch run too; skips as ddp does.
#   ddp   not pytest: ddp_check.py runs examples/train_ddp.py under torchrun
#         (2 CPU ranks) with the tree's extension; skips (77) in ASan builds
#         (WDS_PY_PRELOAD set: no torch in the environment).
#   venv  only makes the environment (ctest's python_venv, the fixture the
#         others require, so that they can run at the same time).
#   dataset_ddp  not pytest: dataset_ddp_check.py, wds.Dataset under torchrun
#         (2 and 3 CPU ranks, DataLoader workers 0, 2, 3); skips as ddp.
#   mypy  not pytest: mypy --strict on the package's stubs and typing_check.py.
#
# Usage: run.sh MODE VENV_DIR SRC_DIR BUILD_DIR WDS_BINARY SHARED_TESTDATA [PYTEST_ARG...]
# PYTEST_ARGs (tree and pip): what pytest runs, default the whole folder
# (the suite is split into several ctest tests, each under 5 minutes).
# Environment: PYTHON3 (the interpreter CMake built the extension for),
# WDS_PY_SKIP (when set, the reason to skip: TSan builds, no Python headers),
# WDS_PY_PRELOAD (ASan builds: the sanitizer runtime, preloaded into pytest's
# python with PYTHONMALLOC=malloc and leak detection off), PIP_INDEX_URL and
# the other PIP_* variables are passed to pip.
# Exit status: 0 passed, 1 a failure, 77 skipped (WDS_PY_SKIP, or no
# package index reachable and no cached environment).
set -euo pipefail
export LC_ALL=C.UTF-8
SKIP=77
# pillow and msgpack: wds.ShardWriter's image and msgpack fields are
# compared with what webdataset writes.
# mypy: the type stubs (python/wds/*.pyi) are checked (ctest python_mypy).
REQUIREMENTS=("pytest" "numpy" "webdataset>=1.0,<2" "pillow" "msgpack" "mypy")
# torch from PyPI (about 45 s and 5.4 GB installed with its CUDA wheels):
# batch.torch() is tested against it. Installed once per user and
# interpreter (venv_ensure_shared: ~/.cache/wds-test-venv, or
# WDS_TEST_VENV_CACHE), not in each build tree. Not in ASan builds, whose preloaded sanitizer
# runtime torch's libraries are not loaded under (those tests skip there).
# torchdata (StatefulDataLoader) and torchvision (examples/train_transforms.py)
# for wds.Dataset's tests, with torch.
if [[ -z ${WDS_PY_PRELOAD:-} ]]; then
  REQUIREMENTS+=("torch" "torchdata" "torchvision")
fi

fail() {
  echo "FAIL setup: $*"
  exit 1
}
if (($# < 6)); then
  echo "usage: run.sh MODE VENV_DIR SRC_DIR BUILD_DIR WDS_BINARY SHARED_TESTDATA [PYTEST_ARG...]" >&2
  exit 2
fi
MODE=$1 VENV=$2 SRC=$3 BUILD=$4 WDS=$5 SHARED=$6
shift 6
PYTEST_ARGS=("$@")
if [[ -n ${WDS_PY_SKIP:-} ]]; then
  echo "SKIP: $WDS_PY_SKIP"
  # The fixture passes: each test that needs it says why it skips.
  [[ $MODE == venv ]] && exit 0
  exit $SKIP
fi
if [[ ($MODE == ddp || $MODE == dataset_ddp || $MODE == readme) && -n ${WDS_PY_PRELOAD:-} ]]; then
  echo "SKIP: ASan build: torch is not installed beside the preloaded sanitizer runtime"
  exit $SKIP
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PYTHON3=${PYTHON3:-python3}
command -v "$PYTHON3" >/dev/null 2>&1 || fail "$PYTHON3 not found"

source "$SRC/tests/lib-venv.sh"
rc=0
(venv_ensure_shared "$VENV" "$PYTHON3" "pytest, numpy, webdataset, PIL, msgpack${WDS_PY_PRELOAD:+#}, torch" \
  "${REQUIREMENTS[@]}") || rc=$?
# No package index (77): the fixture passes, each test then skips saying so.
((rc == 77)) && [[ $MODE == venv ]] && exit 0
((rc == 0)) || exit "$rc"
# torchvision: the loader's built-in augmentation is compared with its
# transforms (test_augment.py). Installed into this build's environment
# with --no-deps (torch, numpy and Pillow come from the shared one), not
# listed in REQUIREMENTS: that would change the shared environment's key
# and install torch again (5.4 GB). Without a package index those tests
# skip, visibly.
if [[ -z ${WDS_PY_PRELOAD:-} && $MODE != readme && $MODE != ddp ]] &&
  ! "$VENV/bin/python" -c "import torchvision" 2>/dev/null; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps torchvision ||
    echo "# torchvision not installed: test_augment.py's comparisons skip"
fi

export WDS_TEST_CLI=$WDS WDS_TEST_SHARED=$SHARED
case $MODE in
venv)
  echo "# $VENV is ready"
  exit 0
  ;;
tree)
  export PYTHONPATH=$BUILD/python
  ;;
readme)
  # README.md's and the docs' code blocks with torch: the `torchrun` quick
  # start and the blocks that need torch, which tools_readme skips.
  export WDS_README_PYTHONPATH=$BUILD/python
  cd "$BUILD"
  exec "$VENV/bin/python" "$SRC/tests/integration/readme.py" "$WDS" "$BUILD/trainer/wds-train" \
    "$SRC/README.md" "$SRC"/docs/{cli,sources,loader,wds-train,c-api,python,migrate-webdataset}.md
  ;;
ddp)
  export PYTHONPATH=$BUILD/python
  cd "$BUILD"
  exec "$VENV/bin/python" "$HERE/ddp_check.py" "$SRC"
  ;;
dataset_ddp)
  export PYTHONPATH=$BUILD/python
  cd "$BUILD"
  exec "$VENV/bin/python" "$HERE/dataset_ddp_check.py"
  ;;
mypy)
  # The type stubs (python/wds/*.pyi, py.typed) against a program using them.
  # MYPYPATH: `import wds` is the source folder's package, whose
  # __init__.pyi describes it (the .py files and the extension unread).
  cd "$BUILD"
  export MYPYPATH=$SRC/python
  exec "$VENV/bin/python" -m mypy --strict --no-incremental --cache-dir /dev/null \
    "$HERE/typing_check.py"
  ;;
pip)
  unset PYTHONPATH
  wheels=$BUILD/pip-wheels
  rm -rf "$wheels"
  # The build isolation fetches scikit-build-core from the index.
  "$VENV/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" \
    -C build-dir="$BUILD/pip-build" -C cmake.define.WDS_WITH_CUDA=OFF \
    -C cmake.define.WDS_WERROR=ON "$SRC" || fail "pip wheel $SRC failed"
  ls "$wheels"/wds-*.whl >/dev/null || fail "pip wheel made no wds wheel"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall \
    --no-deps "$wheels"/wds-*.whl || fail "pip install of the wheel failed"
  echo "# installed $(basename "$wheels"/wds-*.whl)"
  ;;
*) fail "unknown mode $MODE" ;;
esac
# From a directory outside the source tree: `import wds` is the package
# under test, never the source folder python/wds (which has no extension).
cd "$BUILD"
if [[ -n ${WDS_PY_PRELOAD:-} ]]; then
  echo "# sanitized extension: LD_PRELOAD=$WDS_PY_PRELOAD PYTHONMALLOC=malloc"
  export LD_PRELOAD=$WDS_PY_PRELOAD PYTHONMALLOC=malloc
  export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
fi
((${#PYTEST_ARGS[@]})) || PYTEST_ARGS=("$HERE")
rc=0
"$VENV/bin/python" -m pytest -q -rs -p no:cacheprovider "${PYTEST_ARGS[@]}" || rc=$?
# pytest's 5: no test was collected, which here means every module skipped
# itself (test_dataset.py without torch, as in the ASan build): a visible
# skip, not a pass and not a failure.
if ((rc == 5)); then
  echo "SKIP: every test module skipped itself (see the reasons above)"
  exit $SKIP
fi
exit $rc
