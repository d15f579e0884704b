#!/usr/bin/env bash
# Tool test: the GPU checks' scripts on a machine without a GPU:
#   * gpu-run.sh compiles the Python extension from the files
#     python/CMakeLists.txt lists (python/wds/_*.c);
#   * scripts/gpu-run.sh --dry-run lists every step with its time limit,
#     each skipped, in one table, exit 0, the limits summing to at most
#     500 s (240 s with --quick, which runs the correctness steps and the
#     decode figure); --only selects steps; an unknown option is a usage
#     error;
#   * the extension's link (gpu-prepare.sh --link-libs, gpu-run.sh's
#     python-ext step) needs none of the links into CUDA that this machine
#     has in /usr/local/lib: run in a private mount namespace that hides
#     them (unshare -m, as root; skipped, saying so, where not permitted
#     and in sanitized builds);
#   * with a stand-in GPU (nvidia-smi) and compute-sanitizer: a failed
#     extension build fails the Python steps only; a sanitizer that refuses
#     the device ("Device not supported", error 999) is N/A, not available
#     on this runtime, not a failure; a step the budget leaves no time for is
#     a failure (exit 1); a run of every step but the data's leaves at
#     most 8 files in $OUT (the device tool's limit): table.txt and the
#     logs in gpu-run.tar.gz;
#   * the extension links where CUDA's folder has only the versioned
#     runtime (libcudart.so.13: -l:libcudart.so.13), in the same
#     namespace;
#   * gpu-run.sh without the folder scripts/gpu-prepare.sh makes: its
#     set-up fails saying to run gpu-prepare.sh, the GPU steps are skipped
#     (no GPU) or not run, exit 1;
#   * python/bench/train_resnet.py compiles; its options are checked
#     (unknown feeder or model, --steps 0: exit 2 naming them); its table is
#     aligned, one row per run, in plan order; without a usable GPU every
#     run is skipped with its reason and it exits 77.
# Usage: gpu_scripts.sh SRC_DIR PYTHON3 [BUILD_DIR]
set -uo pipefail
SRC=$1 PY=$2 BUILD=${3:-}
passed=0
failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1${2:+: $2}"; failed=$((failed + 1)); }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/wds-gpu-scripts.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
# gpu-run.sh's working data (and its logs while it runs with OUT): this
# test's own, not the machine's default
export WDS_GPU_WORK=$TMP/work
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

if bash -n "$SRC/scripts/gpu-run.sh" && bash -n "$SRC/scripts/gpu-prepare.sh"; then
  ok "gpu-run.sh and gpu-prepare.sh parse"
else
  bad "bash -n"
fi

# The extension gpu-run.sh compiles by hand is the one CMake builds: it
# compiles python/wds/_*.c, and those are the files python/CMakeLists.txt
# lists.
listed=$(sed -n '/^set(WDS_PY_SOURCES/,/)/p' "$SRC/python/CMakeLists.txt" |
  tr ' ()' '\n\n\n' | grep '\.c$' | sort | paste -sd' ')
globbed=$(cd "$SRC/python" && ls wds/_*.c | sort | paste -sd' ')
if grep -q '"$root"/python/wds/_\*\.c' "$SRC/scripts/gpu-run.sh" && [ -n "$listed" ] &&
  [ "$listed" = "$globbed" ]; then
  ok "gpu-run.sh compiles the extension's files CMake lists ($listed)"
else
  bad "the extension's files" "CMake lists: $listed; python/wds/_*.c: $globbed; gpu-run.sh: $(grep -n 'python/wds/.*\.c' "$SRC/scripts/gpu-run.sh")"
fi

rc=0
"$SRC/scripts/gpu-run.sh" --dry-run >dry.out 2>&1 || rc=$?
# in the order of what they are worth: correctness, figures, training,
# sanitizers
steps="setup python-ext ctest pytest-gpu bench-data pixels bench-jpeg bench-device bench-train train-ddp train-gpu memcheck-loader memcheck-trainer racecheck-loader racecheck-trainer"
missing=
for s in $steps; do
  grep -q "^$s  *SKIP  *0  dry run, at most [0-9]* s: ." dry.out || missing="$missing $s"
done
order=$(sed -n 's/^\([a-z-]*\)  *SKIP  *0  dry run.*/\1/p' dry.out | paste -sd' ')
if ((rc == 0)) && [ -z "$missing" ] && [ "$order" = "$steps" ] &&
  (($(grep -c '^step  *result' dry.out) == 1)) && (($(grep -c 'SKIP' dry.out) == 15)); then
  ok "--dry-run: 15 steps in order with their limits, one table, exit 0"
else
  bad "--dry-run" "rc $rc, missing:$missing, order: $order; $(cat dry.out)"
fi
# the limits' sum, from the rows, and as the script says it
limits_sum() {
  sed -n 's/.*dry run, at most \([0-9]*\) s:.*/\1/p' "$1" | awk '{ s += $1 } END { if (NR) print s }'
}
sum=$(limits_sum dry.out)
if [ -n "$sum" ] && ((sum <= 500)) && grep -q "^limits: $sum s in all, budget" dry.out; then
  ok "--dry-run: the limits sum to $sum s (at most 500)"
else
  bad "--dry-run limits" "sum ${sum:-none}: $(grep '^limits' dry.out)"
fi
rc=0
"$SRC/scripts/gpu-run.sh" --dry-run --quick >quick.out 2>&1 || rc=$?
qsum=$(limits_sum quick.out)
if ((rc == 0)) && [ -n "$qsum" ] && ((qsum <= 240)) && grep -q "^limits: $qsum s in all (--quick)" quick.out &&
  grep -q '^ctest  *SKIP  *0  dry run' quick.out && grep -q '^pytest-gpu  *SKIP  *0  dry run' quick.out &&
  grep -q '^pixels  *SKIP  *0  dry run' quick.out && grep -q '^bench-jpeg  *SKIP  *0  dry run' quick.out &&
  grep -q '^bench-train  *SKIP  *0  not in --quick' quick.out && grep -q '^memcheck-loader  *SKIP  *0  not in --quick' quick.out; then
  ok "--dry-run --quick: correctness and the decode figure, the limits sum to $qsum s (at most 240)"
else
  bad "--quick" "rc $rc, sum ${qsum:-none}: $(cat quick.out)"
fi

rc=0
"$SRC/scripts/gpu-run.sh" --dry-run --only bench-jpeg,ctest >only.out 2>&1 || rc=$?
if ((rc == 0)) && grep -q '^ctest  *SKIP  *0  dry run' only.out && grep -q '^bench-jpeg  *SKIP  *0  dry run' only.out &&
  grep -q '^setup  *SKIP  *0  dry run' only.out && grep -q '^python-ext  *SKIP  *0  dry run' only.out &&
  (($(grep -c 'not selected (--only)' only.out) == 11)); then
  ok "--only bench-jpeg,ctest: those two and the set-up, the others not selected"
else
  bad "--only" "rc $rc: $(cat only.out)"
fi
rc=0
"$SRC/scripts/gpu-run.sh" --bogus >bogus.out 2>&1 || rc=$?
if ((rc == 2)) && grep -q '^usage: gpu-run.sh' bogus.out; then ok "an unknown option: usage, exit 2"; else bad "--bogus" "rc $rc: $(cat bogus.out)"; fi

if ((gpus == 0)); then
  rc=0
  OUT=$TMP/out "$SRC/scripts/gpu-run.sh" "$TMP/no-carry" >nocarry.out 2>&1 || rc=$?
  if ((rc == 1)) && grep -q '^setup  *FAIL.*run scripts/gpu-prepare.sh first' nocarry.out &&
    grep -q '^ctest  *SKIP.*no GPU' nocarry.out && grep -q '^bench-train  *SKIP.*no GPU' nocarry.out &&
    [ -f "$TMP/out/table.txt" ] && tar -tzf "$TMP/out/gpu-run.tar.gz" >nocarry.list &&
    grep -qx 'gpu-run/setup.log' nocarry.list; then
    ok "no carried folder: set-up says to run gpu-prepare.sh, GPU steps skipped, \$OUT/table.txt and the logs in \$OUT/gpu-run.tar.gz"
  else
    bad "no carried folder" "rc $rc: $(cat nocarry.out)"
  fi
fi

# The extension's link without this machine's links into CUDA
# (/usr/local/lib/libcudadevrt.a, /usr/local/lib64 and the like): in a
# private mount namespace without them.
fake_carry() { # DIR: a carry folder over BUILD's libwds.a, writing nothing there
  mkdir -p "$1/build/tests" "$1/lib" &&
    ln -s "$BUILD/libwds.a" "$1/build/libwds.a" &&
    { [ ! -d "$BUILD/include" ] || ln -s "$BUILD/include" "$1/build/include"; } &&
    echo "$SRC" >"$1/origin"
}
hide_cuda_links() { # CMD...: CMD without /usr/local's links into CUDA
  # A private mount namespace whose /usr/local holds CUDA itself
  # (cuda, cuda-13.0) and everything else but the links into it that this
  # machine has beside (lib/libcudadevrt.a..., lib64, targets, nvvm); no
  # LIBRARY_PATH either: as on the GPU machine.
  # With CUDART_REAL and CUDART_NAME set, /usr/local/cuda is a folder
  # whose lib64 holds CUDART_NAME (libcudart.so.13, linking to
  # CUDART_REAL) only: CUDA's runtime without the -dev package's
  # unversioned libcudart.so.
  mkdir -p "$TMP/keep"
  env -u LIBRARY_PATH KEEP="$TMP/keep" unshare -m bash -c '
    set -e
    mount --make-rprivate /
    keep=$KEEP
    mount --bind /usr/local "$keep"
    mount -t tmpfs none /usr/local
    into_cuda() { case $(readlink "$1" 2>/dev/null) in */cuda*) return 0 ;; esac; return 1; }
    for e in "$keep"/* "$keep"/.[!.]*; do
      [ -e "$e" ] || [ -L "$e" ] || continue
      n=${e##*/}
      if [ "$n" = cuda ] && [ -n "${CUDART_REAL:-}" ]; then
        mkdir -p /usr/local/cuda/lib64
        ln -s "$CUDART_REAL" "/usr/local/cuda/lib64/$CUDART_NAME"
        continue
      fi
      case $n in cuda | cuda-[0-9]*) ln -s "$e" "/usr/local/$n"; continue ;; esac
      into_cuda "$e" && continue
      if [ "$n" = lib ]; then
        mkdir /usr/local/lib
        for f in "$e"/* "$e"/.[!.]*; do
          { [ -e "$f" ] || [ -L "$f" ]; } && ! into_cuda "$f" && ln -s "$f" /usr/local/lib/
        done
      else
        ln -s "$e" "/usr/local/$n"
      fi
    done
    if ls -l /usr/local/lib | grep -q cuda || [ -e /usr/local/lib64 ]; then
      echo "links into CUDA still there: $(ls -l /usr/local/lib /usr/local/lib64 2>&1 | grep -i cuda)"
      exit 3
    fi
    exec "$@"' hide "$@"
}
if [ -z "$BUILD" ] || [ ! -f "$BUILD/libwds.a" ]; then
  echo "skip: the extension's link (no BUILD_DIR with libwds.a given)"
elif nm -A "$BUILD/libwds.a" 2>/dev/null | grep -E ' U __(asan|tsan|ubsan|sanitizer)_' >/dev/null; then
  echo "skip: the extension's link: $BUILD is a sanitized build (gpu-run.sh builds the plain one's)"
elif ! unshare -m true 2>/dev/null; then
  echo "skip: the extension's link without /usr/local's links into CUDA: unshare -m is not permitted here (needs root)"
else
  rc=0
  if fake_carry "$TMP/link" && "$SRC/scripts/gpu-prepare.sh" --link-libs "$BUILD" "$TMP/link" >link.out 2>&1; then
    OUT=$TMP/link-out TORCH_PY=$PY hide_cuda_links "$SRC/scripts/gpu-run.sh" --only python-ext "$TMP/link" >>link.out 2>&1 || rc=$?
  else
    rc=9
  fi
  if ((rc == 0)) && grep -q '^python-ext  *PASS' link.out && ! grep -q -- '-lcuda\(devrt\|rt_static\)' "$TMP/link/link-libs"; then
    ok "the extension links without /usr/local's links into CUDA ($(grep -o 'linked with .*' link.out | head -1 | cut -c1-80))"
  else
    bad "the extension's link without /usr/local's links into CUDA" "rc $rc: $(cat link.out; tar -xOzf "$TMP/link-out/gpu-run.tar.gz" gpu-run/python-ext.log 2>/dev/null | tail -30)"
  fi
  # CUDA's library folder with only the versioned runtime (libcudart.so.13,
  # no -dev package's libcudart.so): -lcudart found nothing; linked by
  # name now (-l:libcudart.so.13)
  cudart=$(ls /usr/local/cuda/lib64/libcudart.so.[0-9]* 2>/dev/null | grep -E 'libcudart\.so\.[0-9]+$' | head -1)
  if [ ! -s "$TMP/link/link-cuda" ]; then
    echo "skip: only a versioned libcudart: libwds.a holds no CUDA code"
  elif [ -z "$cudart" ]; then
    echo "skip: only a versioned libcudart: no libcudart.so.N in /usr/local/cuda/lib64"
  else
    rc=0
    CUDART_REAL=$(readlink -f "$cudart") CUDART_NAME=${cudart##*/} OUT=$TMP/link-out2 TORCH_PY=$PY \
      hide_cuda_links "$SRC/scripts/gpu-run.sh" --only python-ext "$TMP/link" >link2.out 2>&1 || rc=$?
    if ((rc == 0)) && grep -q "^python-ext  *PASS.*-l:${cudart##*/}" link2.out; then
      ok "a CUDA folder with only ${cudart##*/}: linked by name ($(grep -o 'linked with .*' link2.out | head -1 | cut -c1-80))"
    else
      bad "a CUDA folder with only ${cudart##*/}" "rc $rc: $(cat link2.out; tar -xOzf "$TMP/link-out2/gpu-run.tar.gz" gpu-run/python-ext.log 2>/dev/null | tail -30)"
    fi
  fi
fi

# A stand-in GPU: a failed extension build fails the Python steps only; a
# sanitizer that refuses the device is N/A; out of time is a failure.
mkdir -p "$TMP/bin" "$TMP/fakegpu/build/tests" "$TMP/fakegpu/lib"
printf '#!/bin/sh\necho "GPU 0: Stand-in GPU (UUID: GPU-0)"\n' >"$TMP/bin/nvidia-smi"
printf '%s\n' '#!/bin/sh' 'echo "========= COMPUTE-SANITIZER"' \
  'echo "========= Error: Device not supported. Please refer to the Supported Devices section."' \
  'echo "========= Program hit unknown error (error 999) on CUDA API call to cudaMalloc."' \
  'exit 1' >"$TMP/bin/compute-sanitizer"
chmod +x "$TMP/bin/nvidia-smi" "$TMP/bin/compute-sanitizer"
echo "$SRC" >"$TMP/fakegpu/origin"
echo "/nonexistent/libnot-there.so" >"$TMP/fakegpu/link-libs"
rc=0
PATH=$TMP/bin:$PATH OUT=$TMP/fg-out TORCH_PY=$PY "$SRC/scripts/gpu-run.sh" \
  --only python-ext,pytest-gpu,memcheck-loader "$TMP/fakegpu" >fakegpu.out 2>&1 || rc=$?
if ((rc == 1)) && grep -q '^setup  *PASS' fakegpu.out && grep -q '^python-ext  *FAIL.*libnot-there' fakegpu.out &&
  grep -q '^pytest-gpu  *FAIL.*the Python extension did not build' fakegpu.out &&
  grep -q '^memcheck-loader  *N/A  .*not available on this runtime.*Device not supported' fakegpu.out; then
  ok "stand-in GPU: a failed extension fails the Python steps only; a sanitizer refusing the device is N/A"
else
  bad "stand-in GPU" "rc $rc: $(cat fakegpu.out)"
fi
# What comes back: the device tool returns at most 8 files from $OUT (16
# MiB each): a run of every step but the data's leaves its table and one
# archive of the logs there, nothing else (it left ~25 logs and ~80 MB of
# photo shards)
rc=0
PATH=$TMP/bin:$PATH OUT=$TMP/fg-all TORCH_PY=$PY "$SRC/scripts/gpu-run.sh" \
  --only ctest,pytest-gpu,pixels,bench-jpeg,bench-device,bench-train,train-ddp,train-gpu,memcheck-loader,memcheck-trainer,racecheck-loader,racecheck-trainer \
  "$TMP/fakegpu" >fg-all.out 2>&1 || rc=$?
nfiles=$(find "$TMP/fg-all" -mindepth 1 | wc -l)
big=$(find "$TMP/fg-all" -type f -size +16M | wc -l)
tar -tzf "$TMP/fg-all/gpu-run.tar.gz" >fg-all.list 2>&1
members=$(grep -c '\.\(log\|out\|tsv\|txt\)$' fg-all.list)
if ((rc == 1 && nfiles <= 8 && big == 0 && members >= 14)) && [ -f "$TMP/fg-all/table.txt" ] &&
  grep -qx 'gpu-run/memcheck-test_loader_gpu.out' fg-all.list; then
  ok "a run of 14 steps leaves $nfiles files in \$OUT (at most 8): table.txt, gpu-run.tar.gz ($members logs)"
else
  bad "files left in \$OUT" "rc $rc, $nfiles entries ($big over 16 MiB), $members logs packed: $(find "$TMP/fg-all" | head -40)"
fi
rc=0
PATH=$TMP/bin:$PATH OUT=$TMP/fg-out2 TORCH_PY=$PY WDS_GPU_BUDGET=12 "$SRC/scripts/gpu-run.sh" \
  --only memcheck-loader "$TMP/fakegpu" >budget.out 2>&1 || rc=$?
if ((rc == 1)) && grep -q '^memcheck-loader  *FAIL  *0  out of time: not run' budget.out; then
  ok "a step the budget leaves no time for is a failure, exit 1"
else
  bad "out of time" "rc $rc: $(cat budget.out)"
fi

TR=$SRC/python/bench/train_resnet.py
# No bytecode written into the source tree.
export PYTHONDONTWRITEBYTECODE=1
if "$PY" -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
  "$TR" "$TMP/tr.pyc" 2>err.txt; then
  ok "train_resnet.py compiles"
else
  bad "py_compile" "$(cat err.txt)"
fi
for args in "--feeders dali" "--models resnet9" "--steps 0" "--feeders ,"; do
  rc=0
  # shellcheck disable=SC2086  # split on purpose
  "$PY" "$TR" x.tar $args >/dev/null 2>err.txt || rc=$?
  opt=${args%% *}
  if ((rc == 2)) && grep -q -- "$opt" err.txt; then
    ok "train_resnet.py $args: exit 2 naming $opt"
  else
    bad "train_resnet.py $args" "rc $rc: $(cat err.txt)"
  fi
done
if "$PY" - "$SRC/python/bench" <<'PY' >unit.out 2>&1; then
import sys
sys.path.insert(0, sys.argv[1])
import train_resnet as t
a = t.parse_args(["a.tar", "b.tar", "--models", "resnet50,none", "--feeders", "torch-wds,wds",
                  "--steps", "7", "--workers", "3"])
assert a.shards == ["a.tar", "b.tar"] and a.steps == 7 and a.workers == 3
assert t.plan(a) == [("resnet50", "torch-wds"), ("resnet50", "wds"),
                     ("none", "torch-wds"), ("none", "wds")], t.plan(a)
rows = [t.row("resnet50", "wds", 2874.4, 1.23, 44.5, 50),
        t.row("resnet50", "torch-wds", 1210.0, 57.9, 105.8, 48, "budget 30 s reached"),
        t.row("none", "wds", note="skipped: no torch")]
lines = t.format_table(rows)
print("\n".join(lines))
assert len(lines) == 2 + len(rows)
assert lines[0].split() == ["model", "feeder", "images/s", "data-wait", "step", "ms", "steps", "note"]
assert set(lines[1]) <= {"-", " "}
# the numbers right-aligned in their columns, the notes left-aligned
col = lines[0].index("images/s") + len("images/s")
assert lines[2][:col].endswith("2,874") and lines[3][:col].endswith("1,210"), lines
assert lines[2][:lines[0].index("step ms") + 7].endswith("44.5")
assert "1.2%" in lines[2] and "57.9%" in lines[3] and lines[4].rstrip().endswith("skipped: no torch")
assert lines[3].rstrip().endswith("budget 30 s reached")
assert lines[0].index("note") == lines[3].index("budget")
print("unit ok")
PY
  ok "train_resnet.py: options, plan order, the table"
else
  bad "train_resnet.py unit" "$(cat unit.out)"
fi
if ((gpus == 0)); then
  rc=0
  "$PY" "$TR" x.tar --models none,resnet18 >skip.out 2>&1 || rc=$?
  if ((rc == 77)) && (($(grep -c '"note": "skipped: ' skip.out) == 4)) &&
    (($(grep -c '  skipped: no ' skip.out) == 4)); then
    ok "train_resnet.py without a GPU: 4 runs skipped with their reason, exit 77 ($(grep -m1 -o 'skipped: [^"]*' skip.out))"
  else
    bad "train_resnet.py without a GPU" "rc $rc: $(cat skip.out)"
  fi
fi

echo "$passed passed, $failed failed"
((failed == 0))
