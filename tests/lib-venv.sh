# lib-venv.sh — sourced by the tests that need Python packages from the
# package index (tests/interop/interop.sh, python/tests/run.sh, ...): a
# cached virtual environment, made again when the interpreter or the
# requirements change, and a visible skip (exit 77) when no package index
# answers. venv_ensure_shared keeps large requirements (torch) in one
# per-user cache shared by every build tree.
# The caller defines fail() (prints why and exits 1).

# venv_ensure VENV PYTHON3 IMPORTS REQUIREMENT...
#   VENV     the environment's directory (made when missing or stale)
#   IMPORTS  what `import IMPORTS` must load for it to count as complete
#   The first requirement is the one the index is probed with.
# PIP_INDEX_URL and the other PIP_* variables are passed to pip.
venv_ensure() {
  local venv=$1 py=$2 imports=$3
  shift 3
  local reqs=("$@") stamp marker=$venv/.wds-venv-ready
  # The marker records what the environment was made with.
  stamp="python=$("$py" -c 'import sys; print(sys.version.split()[0])') ${reqs[*]}"
  if [[ -f $marker && $(cat "$marker") == "$stamp" ]] &&
    "$venv/bin/python" -c "import $imports" 2>/dev/null; then
    return 0
  fi
  echo "# making the virtual environment $venv (${reqs[*]})"
  "$py" -c 'import venv, ensurepip' 2>/dev/null ||
    fail "$py has no venv/ensurepip module: apt-get install python3-venv"
  rm -rf "$venv"
  "$py" -m venv "$venv" || fail "$py -m venv $venv failed (apt-get install python3-venv)"
  # Probe: a quick download of the first requirement alone, with one retry
  # and a short timeout, so that a machine without network skips in seconds.
  local dir out rc=0
  dir=$(mktemp -d)
  out=$(timeout 60 "$venv/bin/python" -m pip download --no-deps --retries 1 --timeout 15 \
    --disable-pip-version-check -d "$dir" "${reqs[0]}" 2>&1) || rc=$?
  rm -rf "$dir"
  if ((rc != 0)); then
    # A network failure skips; anything else (a bad requirement, a broken
    # pip) fails.
    local neterr='NewConnectionError|ConnectTimeoutError|ReadTimeoutError|ProxyError|Temporary failure in name resolution|Name or service not known|Network is unreachable|Connection refused|No route to host|timed out|Max retries exceeded|ConnectionError'
    if ((rc == 124)) || grep -qiE "$neterr" <<<"$out"; then
      rm -rf "$venv"
      echo "$out" | tail -n 5 | sed 's/^/# pip: /'
      local why
      why=$(grep -oiE "$neterr" <<<"$out" | head -n 1)
      ((rc == 124)) && why="pip download timed out after 60 s"
      echo "SKIP: no package index reachable (${why:-network error}; index: ${PIP_INDEX_URL:-https://pypi.org/simple})"
      exit 77
    fi
    echo "$out" | tail -n 20 | sed 's/^/# pip: /'
    fail "pip download ${reqs[0]} failed (not a network error, see above)"
  fi
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${reqs[@]}" ||
    fail "pip install ${reqs[*]} into $venv failed"
  echo "$stamp" >"$marker"
}

# venv_ensure_shared VENV PYTHON3 IMPORTS REQUIREMENT...
#   As venv_ensure, for large requirements (torch and its CUDA wheels: about
#   5.4 GB installed): they are installed once per user, interpreter and
#   requirement list, in WDS_TEST_VENV_CACHE (default
#   ~/.cache/wds-test-venv)/pyVERSION-HASH, made under a lock (flock) so
#   that build trees testing at once make it once; VENV is a small
#   environment of the build tree's own that sees the shared one's packages
#   through a .pth file, so what a test installs into VENV (python_pip's
#   wheel) stays in that tree.
venv_ensure_shared() {
  local venv=$1 py=$2 imports=$3
  shift 3
  local cache=${WDS_TEST_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wds-test-venv}
  local pyver key shared rc=0
  pyver=$("$py" -c 'import sys; print(sys.version.split()[0])')
  key=py$pyver-$(printf '%s\n' "$@" | sha256sum | cut -c1-12)
  shared=$cache/$key
  mkdir -p "$cache" || fail "cannot make $cache"
  (
    flock 9
    venv_ensure "$shared" "$py" "$imports" "$@"
  ) 9>"$cache/$key.lock" || rc=$?
  ((rc == 0)) || exit "$rc" # 77: no index (said), 1: failed (said)
  local marker=$venv/.wds-venv-ready stamp="shared=$shared"
  if [[ -f $marker && $(cat "$marker") == "$stamp" ]] &&
    "$venv/bin/python" -c "import $imports" 2>/dev/null; then
    return 0
  fi
  echo "# making the virtual environment $venv over $shared"
  rm -rf "$venv"
  "$py" -m venv "$venv" || fail "$py -m venv $venv failed (apt-get install python3-venv)"
  local paths='import sysconfig; p = sysconfig.get_paths(); print(p["purelib"]); print(p["platlib"])'
  local mine
  # (its purelib alone: `| head -n 1` closed the pipe before python wrote
  # the second line, an intermittent BrokenPipeError under pipefail)
  mine=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  "$shared/bin/python" -c "$paths" | sort -u >"$mine/wds-shared-venv.pth" ||
    fail "cannot write $mine/wds-shared-venv.pth"
  "$venv/bin/python" -c "import $imports" ||
    fail "$venv does not import $imports through $shared"
  echo "$stamp" >"$marker"
}
