#!/usr/bin/env bash
# The GPU checks, part 2 of 2: run in the checkout copied to a GPU machine,
# with the folder scripts/gpu-prepare.sh made (gpu-carry/) carried along.
# No package access and no build there: it links the build tree to the path
# it was built at, sets the library path (CUDA's, NCCL's from the torch
# venv, the carried libraries), compiles the Python extension against that
# machine's Python, the carried libwds.a and CUDA's runtime (explicit -L),
# then runs the steps in the order of what they are worth, each under its
# time limit, the limits summing to at most 500 s (the device tool gives a
# command 600 s, the machine's start and the transfers the rest):
#   correctness  ctest -L gpu (test_loader_gpu, test_trainer_gpu and its H2D
#                ratio, test_jpeg_gpu_device; tools_train_gpu later),
#                pytest -m gpu, and the pixels of the GPU JPEG decoder
#                against the CPU path and torchvision's
#                decode_jpeg(device="cuda") (tests/gpu/pixels.py, on photos
#                made by bench-data)
#   figures      GPU decode photos/s and the CPU threads it used against
#                torchvision's batched nvJPEG decode and the CPU path
#                (bench-gpu-jpeg.sh); device= against host batches
#                (bench-gpu-loader.sh); ResNet-50 in bf16 fed by wds with GPU
#                decode, with CPU decode and by torch DataLoader + webdataset:
#                images/s and data-wait
#   training     examples/train_ddp.py under torchrun (NCCL), then
#                tools_train_gpu (train.sh and the README's demo on cuda)
#   sanitizers   compute-sanitizer memcheck (--leak-check full, with
#                tests/gpu/compute-sanitizer.supp.xml) and racecheck on
#                test_loader_gpu and test_trainer_gpu, judged by
#                scripts/sanitizer-check.py; on runtimes where the tool
#                refuses the device ("Device not supported", error 999: gVisor)
#                the row says N/A, not available on this runtime
# and prints one table. --quick (at most 240 s): the correctness steps and
# the decode figure only, for a second call. A step that fails, runs out of
# its limit (TIMEOUT) or cannot start for want of time (out of time) is a
# failure: exit status 1. The C steps need only the set-up; when the
# extension does not build, the Python steps fail and the others run.
# Without a GPU (nvidia-smi lists none) every GPU step is reported as
# skipped and the script exits 0; --dry-run prints the steps, their limits
# and the limits' sum without running anything.
#
# Usage: scripts/gpu-run.sh [--dry-run] [--quick] [--only STEP,...] [CARRY_DIR]
#   (CARRY_DIR default: gpu-carry; --only runs those steps, the set-up
#   (setup, python-ext) always,
#   e.g. --only bench-jpeg,bench-train to run the benchmarks again)
# Environment: OUT (when set: $OUT/table.txt and the logs packed into one
# $OUT/gpu-run.tar.gz, under 16 MiB: the device tool brings back at most 8
# files from $OUT; else the logs stay in CARRY_DIR/logs), WDS_GPU_WORK (the
# working data: photo shards, the DDP digits, bench data, carried Python
# packages; default ${TMPDIR:-/tmp}/wds-gpu-work, kept for a second call),
# WDS_GPU_BUDGET (seconds, default: the limits' sum + 20), TORCH_PY (default
# /opt/torch/.venv/bin/python3, else python3), BENCH_STEPS (default 30),
# WORKERS (default: cores - 1, at most 15).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dry=0
quick=0
only=
while (($#)); do
  case $1 in
  --dry-run) dry=1 ;;
  --quick) quick=1 ;;
  --only) only=,${2:?--only STEP,...},; shift ;;
  --only=*) only=,${1#--only=}, ;;
  -*) echo "usage: gpu-run.sh [--dry-run] [--quick] [--only STEP,...] [CARRY_DIR]" >&2; exit 2 ;;
  *) break ;;
  esac
  shift
done
carry=${1:-$root/gpu-carry}
t_start=$SECONDS
# Working data outside $OUT (the device tool returns at most 8 files of it);
# with OUT the logs are written beside it and packed at the end (pack_logs).
work=${WDS_GPU_WORK:-${TMPDIR:-/tmp}/wds-gpu-work}
if ((dry)); then
  logs=$(mktemp -d "${TMPDIR:-/tmp}/wds-gpu-run.XXXXXX")
elif [ -n "${OUT:-}" ]; then
  logs=$work/logs
  rm -rf "$logs"
else
  logs=$carry/logs
fi
mkdir -p "$logs" || exit 1
summary=$logs/summary.tsv
: >"$summary"
note() { echo "gpu-run: $*"; }

# ---- what comes back: $OUT/table.txt and $OUT/gpu-run.tar.gz --------------------
# pack_logs: the logs (step logs, summary, table, bench.jsonl, the
# sanitizers' output) into $OUT/gpu-run.tar.gz, each log over 1 MiB cut to
# its first and last 512 KiB (64 KiB if the archive is still over 15 MiB),
# and the table beside it: two files, under the device tool's limits.
pack_logs() {
  local f keep size
  mkdir -p "$OUT" || return 1
  cp "$logs/table.txt" "$OUT/table.txt" || return 1
  for keep in 524288 65536; do
    while IFS= read -r -d '' f; do
      size=$(stat -c %s "$f")
      ((size > 2 * keep)) || continue
      { head -c "$keep" "$f"
        printf '\n[... gpu-run.sh cut %s bytes here ...]\n' $((size - 2 * keep))
        tail -c "$keep" "$f"; } >"$f.cut" && mv "$f.cut" "$f"
    done < <(find "$logs" -type f -print0)
    tar -czf "$OUT/gpu-run.tar.gz" -C "$logs" --transform 's,^\.,gpu-run,' . || return 1
    (($(stat -c %s "$OUT/gpu-run.tar.gz") <= 15 * 1024 * 1024)) && return 0
  done
  echo "gpu-run: $OUT/gpu-run.tar.gz is over 15 MiB" >&2
  return 1
}

# ---- the table ----------------------------------------------------------------
# record STEP RESULT SECONDS DETAIL
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$summary"; }
table() {
  echo
  echo "== GPU checks$( ((quick)) && echo " (--quick)"): $(date -u +%FT%TZ), ${gpu_name:-no GPU}, $((SECONDS - t_start)) s of $budget; $( ((dry)) && echo "dry run" || echo "logs in ${OUT:+$OUT/gpu-run.tar.gz}${OUT:-$logs}")"
  awk -F'\t' '
    { step[NR] = $1; res[NR] = $2; sec[NR] = $3; det[NR] = $4
      if (length($1) > w1) w1 = length($1); if (length($2) > w2) w2 = length($2) }
    END {
      if (w1 < 4) w1 = 4; if (w2 < 6) w2 = 6
      printf "%-" w1 "s  %-" w2 "s  %6s  %s\n", "step", "result", "s", "detail"
      for (i = 1; i <= NR; i++) printf "%-" w1 "s  %-" w2 "s  %6s  %s\n", step[i], res[i], sec[i], det[i]
    }' "$summary"
}

# ---- set-up --------------------------------------------------------------------
gpus=0
gpu_name=
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  gpu_name=$(nvidia-smi -L 2>/dev/null | head -1 | sed 's/ (UUID.*//')
fi
((gpus > 0)) || gpu_name=
nogpu="no GPU (nvidia-smi lists none)"
build=$carry/build
TORCH_PY=${TORCH_PY:-/opt/torch/.venv/bin/python3}
[ -x "$TORCH_PY" ] || TORCH_PY=$(command -v python3 || echo python3)
workers=${WORKERS:-$(($(nproc) > 16 ? 15 : $(nproc) - 1))}
((workers >= 1)) || workers=1
steps=${BENCH_STEPS:-30}
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
check=$root/scripts/sanitizer-check.py
supp=$root/tests/gpu/compute-sanitizer.supp.xml
setup_ok=0
py_ok=0

# step NAME LIMIT FUNCTION WHAT: runs FUNCTION (which sets DETAIL and
# returns 0 pass, 77 skip, 78 not available on this runtime, else fail)
# under LIMIT seconds (less when the budget is nearly spent) with its output
# in $logs/NAME.log, and records the row. A step the budget leaves no time
# for is a failure (out of time), as is one over its limit (TIMEOUT).
DETAIL=
step() {
  local name=$1 limit=$2 fn=$3 what=$4 left rc t0
  left=$((budget - (SECONDS - t_start) - 5))
  if [ -n "$only" ] && [ "$name" != setup ] && [ "$name" != python-ext ] && [[ $only != *",$name,"* ]]; then
    record "$name" SKIP 0 "not selected (--only)"
    return
  fi
  if ((dry)); then
    record "$name" SKIP 0 "dry run, at most ${limit} s: $what"
    return
  fi
  if ((left < 10)); then
    record "$name" FAIL 0 "out of time: not run (budget $budget s)"
    return
  fi
  ((limit <= left)) || limit=$left
  DETAIL=
  t0=$SECONDS
  note "$name (at most ${limit} s)"
  STEP_LIMIT=$limit
  STEP_END=$((SECONDS + limit))
  STEP_LOG=$logs/$name.log
  "$fn" >"$STEP_LOG" 2>&1
  rc=$?
  local took=$((SECONDS - t0))
  # a command cut short by the step's end (lim), whatever status the step
  # made of it
  ((rc == 0 || rc == 77 || rc == 78 || took < limit)) || rc=124
  [ -n "$DETAIL" ] || DETAIL=$(grep -v '^\s*$' "$logs/$name.log" | tail -1 | cut -c1-150)
  case $rc in
  0) record "$name" PASS "$took" "$DETAIL" ;;
  77) record "$name" SKIP "$took" "$DETAIL" ;;
  78) record "$name" N/A "$took" "not available on this runtime: $DETAIL" ;;
  124 | 137) record "$name" TIMEOUT "$took" "over ${limit} s: $DETAIL" ;;
  *) record "$name" FAIL "$took" "$DETAIL (exit $rc)" ;;
  esac
}
# lim CMD...: CMD under what is left of the step's limit (SIGTERM, then
# SIGKILL 10 s later): the step's commands together stay within its limit.
lim() {
  local left=$((STEP_END - SECONDS))
  ((left <= STEP_LIMIT)) || left=$STEP_LIMIT
  ((left >= 1)) || left=1
  timeout -k 10 "$left" "$@"
}
needs_gpu() {
  if ((gpus < 1)); then
    DETAIL=$nogpu
    return 77
  fi
  if ((!setup_ok)); then
    DETAIL="set-up failed (see setup.log)"
    return 1
  fi
}
# needs_python: needs_gpu, and the extension built (python-ext).
needs_python() {
  needs_gpu || return
  if ((!py_ok)); then
    DETAIL="the Python extension did not build (see python-ext.log)"
    return 1
  fi
}

do_setup() {
  [ -d "$build" ] && [ -f "$carry/origin" ] || {
    DETAIL="no $carry/build: run scripts/gpu-prepare.sh first (on a machine without a GPU) and carry its folder"
    return 1
  }
  local origin
  origin=$(cat "$carry/origin")
  if [ "$origin" != "$root" ]; then
    if [ -L "$origin" ] || [ ! -e "$origin" ]; then
      mkdir -p "$(dirname "$origin")" && ln -sfn "$root" "$origin" || {
        DETAIL="cannot link $origin -> $root (the build tree's absolute path)"
        return 1
      }
    elif [ "$(cd "$origin" && pwd -P)" != "$(cd "$root" && pwd -P)" ]; then
      DETAIL="$origin exists and is not this checkout: the build tree's paths point there"
      return 1
    fi
    echo "linked $origin -> $root"
  fi
  # CUDA's libraries, NCCL from the torch venv, then the carried ones.
  local cuda_lib nccl_lib d
  cuda_lib=
  for d in /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib64 /usr/local/cuda/lib; do
    [ -e "$d/libcudart.so.13" ] || [ -e "$d/libcudart.so" ] && { cuda_lib=$d; break; }
  done
  # NCCL: the torch venv's (nvidia/nccl/lib of the pip wheel), else CUDA's.
  nccl_lib=$(find "$(dirname "$(dirname "$TORCH_PY")")"/lib/python3*/site-packages/nvidia \
    -name 'libnccl.so.2' -print -quit 2>/dev/null)
  nccl_lib=${nccl_lib%/*}
  [ -n "$nccl_lib" ] || [ -z "$cuda_lib" ] || [ ! -e "$cuda_lib/libnccl.so.2" ] || nccl_lib=$cuda_lib
  LIBPATH=${cuda_lib}${nccl_lib:+:$nccl_lib}:$carry/lib
  CUDA_LIB=$cuda_lib
  # The GPU JPEG decoder's libnvjpeg: the carried one (the header's version).
  for d in "$carry"/lib/libnvjpeg.so.*; do
    [ -e "$d" ] && export WDS_NVJPEG_LIBRARY=$d && break
  done
  echo "libnvjpeg: ${WDS_NVJPEG_LIBRARY:-not carried (looked for in CUDA and the torch venv)}"
  echo "CUDA libraries: ${cuda_lib:-none found}; NCCL: ${nccl_lib:-none found}; carried: $(ls "$carry/lib" | tr '\n' ' ')"
  setup_ok=1
  DETAIL="build tree linked; CUDA libraries ${cuda_lib:-not found}; NCCL ${nccl_lib:-not found}"
}

do_python_ext() {
  if ((!setup_ok)); then
    DETAIL="set-up failed (see setup.log)"
    return 1
  fi
  local cuda_lib=$CUDA_LIB d
  echo "python: $TORCH_PY ($("$TORCH_PY" -V 2>&1))"
  # The extension: python/wds/_*.c (the files python/CMakeLists.txt lists)
  # against this Python, the carried libwds.a, the libraries CMake linked it
  # with but CUDA's (here, or carried: link-libs) and, when libwds.a holds
  # CUDA code (link-cuda), CUDA's runtime from this machine's CUDA with an
  # explicit -L: nothing found through links that only some machines have.
  local inc ext out libs=() tok b cand
  inc=$("$TORCH_PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])') &&
    ext=$("$TORCH_PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))') || {
    DETAIL="$TORCH_PY: no sysconfig"
    return 1
  }
  [ -f "$inc/Python.h" ] || {
    DETAIL="no Python.h in $inc: the extension cannot be compiled"
    return 1
  }
  while read -r tok; do
    case $tok in
    -l*) libs+=("$tok") ;;
    /*)
      if [ -e "$tok" ]; then
        libs+=("$tok")
      else
        b=$(basename "$tok")
        cand=
        for d in "$carry/lib" $cuda_lib /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64; do
          cand=$(ls "$d/$b" "$d/$b".* 2>/dev/null | head -1)
          [ -n "$cand" ] && break
        done
        [ -n "$cand" ] || {
          DETAIL="the extension links $tok: not here, not carried"
          return 1
        }
        libs+=("$cand")
      fi
      ;;
    esac
  done <"$carry/link-libs"
  local cuda_link=()
  if [ -s "$carry/link-cuda" ]; then
    [ -n "$cuda_lib" ] || {
      DETAIL="libwds.a needs CUDA's runtime ($(tr '\n' ' ' <"$carry/link-cuda")) and no CUDA library folder was found"
      return 1
    }
    cuda_link=(-L"$cuda_lib")
    local v
    while read -r tok; do
      [ -n "$tok" ] || continue
      # -lNAME needs an unversioned libNAME.so (a -dev package's link):
      # where only libNAME.so.N is there, that file by name (-l:)
      if [[ $tok == -l[!:]* ]] && [ ! -e "$cuda_lib/lib${tok#-l}.so" ] &&
        [ ! -e "$cuda_lib/lib${tok#-l}.a" ]; then
        v=$(cd "$cuda_lib" && ls -d "lib${tok#-l}".so.* 2>/dev/null | sort -V | head -1)
        [ -z "$v" ] || tok=-l:$v
      fi
      cuda_link+=("$tok")
    done <"$carry/link-cuda"
  fi
  out=$build/python/wds
  mkdir -p "$out" && cp "$root"/python/wds/*.py "$out/" || return 1
  local cc=${CC:-cc}
  command -v "$cc" >/dev/null 2>&1 || cc=gcc
  lim "$cc" -std=c11 -O2 -fPIC -fvisibility=hidden -D_GNU_SOURCE -shared \
    -I"$root/include" -I"$build/include" -I"$inc" "$root"/python/wds/_*.c \
    -o "$out/_wds$ext" "$build/libwds.a" "${libs[@]}" "${cuda_link[@]}" -lstdc++ -Wl,--exclude-libs,ALL \
    -Wl,-rpath,"${cuda_lib:+$cuda_lib:}$carry/lib" || {
    DETAIL="compiling the extension failed"
    return 1
  }
  (cd "$build" && PYTHONPATH=$build/python lim "$TORCH_PY" -c 'import wds; print("import wds:", wds.__file__)') || {
    DETAIL="the extension does not import"
    return 1
  }
  # Pure-Python packages carried for what this venv lacks (never shadowing its own).
  PYEXTRA=$work/pylib
  rm -rf "$PYEXTRA" && mkdir -p "$PYEXTRA"
  if [ -d "$carry/pylib" ]; then
    for d in "$carry"/pylib/*; do
      b=$(basename "$d")
      case $b in *.dist-info | __pycache__ | bin) continue ;; esac
      "$TORCH_PY" -c "import ${b%.py}" 2>/dev/null || ln -s "$d" "$PYEXTRA/$b"
    done
  fi
  echo "carried Python packages used: $(ls "$PYEXTRA" | tr '\n' ' ')"
  py_ok=1
  DETAIL="extension built for $("$TORCH_PY" -V 2>&1)${cuda_link[*]:+, linked with ${cuda_link[*]}}"
}

# gpu_ctest ARGS...: ctest -L gpu ARGS in the carried build, verbosely.
gpu_ctest() {
  needs_gpu || return
  (cd "$build" && LD_LIBRARY_PATH=$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
    WDS_PYTHON3=$TORCH_PY lim ctest -L gpu -V --timeout "$STEP_LIMIT" "$@")
}
do_ctest() {
  needs_gpu || return
  gpu_ctest -E '^tools_train_gpu$'
  local rc=$? h2d
  h2d=$(grep -o 'ratio [0-9.]* (target' "$STEP_LOG" | head -1 | awk '{print $2}')
  # nvJPEG against the CPU path (test_jpeg_gpu_device): for the bounds
  local px
  px=$(grep -o 'JPEG rows: [0-9.]* on average, [0-9.]* at worst (largest byte difference [0-9]*)' "$STEP_LOG" | head -1)
  DETAIL="$(grep -E '[0-9]+% tests passed' "$STEP_LOG" | tail -1)${h2d:+; H2D ratio $h2d of plain pinned cudaMemcpy (target 0.8)}${px:+; pixels: $px}"
  return $rc
}
do_train_gpu() {
  needs_gpu || return
  gpu_ctest -R '^tools_train_gpu$'
  local rc=$?
  local sum
  sum=$(grep -E '^[0-9]+: [0-9]+ passed, [0-9]+ failed' "$STEP_LOG" | tail -1 | cut -d' ' -f2-)
  DETAIL="${sum:-no summary: $(grep -m1 -E '^[0-9]+: FAIL' "$STEP_LOG" | cut -d' ' -f2- | cut -c1-80)}; $(grep -o 'demo on the GPU: .*' "$STEP_LOG" | head -1 | cut -c1-110)"
  return $rc
}

# sanitize TOOL TEST: compute-sanitizer --tool TOOL on BUILD/tests/TEST.
sanitize() {
  local tool=$1 t=$2 args=() rc
  needs_gpu || return
  [ -x "$sanitizer" ] || {
    DETAIL="no compute-sanitizer"
    return 77
  }
  args=(--tool "$tool" --print-limit 100000)
  if [ "$tool" = memcheck ]; then
    args+=(--leak-check full)
    "$sanitizer" --help 2>/dev/null | grep -q -- '--suppressions' && args+=(--suppressions "$supp")
  fi
  local refused=
  while :; do
    echo "$sanitizer ${args[*]} $t"
    (cd "$build/tests" && LD_LIBRARY_PATH=$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
      WDS_TEST_UNDER_SANITIZER=1 lim "$sanitizer" "${args[@]}" "./$t") >"$logs/$tool-$t.out" 2>&1
    rc=$?
    cat "$logs/$tool-$t.out"
    echo "--- exit $rc"
    # A tool that refuses the suppression file runs nothing: once more
    # without it (its probe errors are then counted by sanitizer-check.py).
    if [[ ${args[*]} == *--suppressions* ]] && ! grep -q 'SUMMARY' "$logs/$tool-$t.out" &&
      grep -qi 'suppression' "$logs/$tool-$t.out"; then
      refused="; the suppression file was refused (see the log): ran without it"
      args=("${args[@]:0:${#args[@]}-2}")
      continue
    fi
    break
  done
  # gVisor's runtime: the tool refuses the device, then fails its first
  # allocation with error 999. Neither a pass nor a failure of ours.
  if grep -qiE 'Device not supported|error 999|cudaErrorUnknown.*999' "$logs/$tool-$t.out" &&
    ! grep -q '^[0-9]* passed, [0-9]* failed' "$logs/$tool-$t.out"; then
    DETAIL="compute-sanitizer $tool: $(grep -m1 -oiE 'Device not supported|error 999[^.]*' "$logs/$tool-$t.out")"
    return 78
  fi
  DETAIL=$("$TORCH_PY" "$check" "$logs/$tool-$t.out" --json "$logs/$tool-$t.json" | head -1)$refused
  ((rc == 124 || rc == 137)) && return $rc
  "$TORCH_PY" "$check" "$logs/$tool-$t.out" >/dev/null || return 1
  # The test's own verdict, under the tool: its summary line.
  grep -q '^[0-9]* passed, 0 failed' "$logs/$tool-$t.out" || {
    DETAIL="$DETAIL; the test failed under $tool"
    return 1
  }
}
do_memcheck_loader() {
  sanitize memcheck test_loader_gpu
}
do_memcheck_trainer() {
  sanitize memcheck test_trainer_gpu
}
do_racecheck_loader() {
  sanitize racecheck test_loader_gpu
}
do_racecheck_trainer() {
  sanitize racecheck test_trainer_gpu
}

do_pytest() {
  needs_python || return
  "$TORCH_PY" -c 'import pytest' 2>/dev/null || PYTHONPATH=$PYEXTRA "$TORCH_PY" -c 'import pytest' 2>/dev/null || {
    DETAIL="no pytest in $TORCH_PY's venv, none carried"
    return 77
  }
  (cd "$build" && PYTHONPATH=$build/python:$PYEXTRA WDS_TEST_CLI=$build/tools/wds \
    lim "$TORCH_PY" -m pytest -q -s -p no:cacheprovider -m gpu "$root/python/tests")
  local rc=$?
  if ((rc == 5)); then
    DETAIL="no test marked gpu in python/tests"
    return 77
  fi
  local px
  px=$(grep -o 'GPU vs CPU mean absolute difference: mean [0-9.]* worst row [0-9.]*, largest value difference [0-9]*' "$STEP_LOG" | head -1)
  DETAIL="$(grep -E '[0-9]+ (passed|failed)' "$STEP_LOG" | tail -1)${px:+; ${px#GPU vs CPU mean absolute difference: }}"
  return $rc
}

do_ddp() {
  needs_python || return
  local d=$work/ddp-data out
  rm -rf "$d" && mkdir -p "$d"
  lim "$TORCH_PY" "$root/scripts/make-digits.py" "$d/files" >/dev/null &&
    LD_LIBRARY_PATH=$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} lim "$build/tools/wds" write -o "$d/digits-train-%04d.tar" --maxcount 300 "$d/files/train" >/dev/null || {
    DETAIL="could not write the digits' shards"
    return 1
  }
  (cd "$d" && PYTHONPATH=$build/python OMP_NUM_THREADS=1 lim "$TORCH_PY" -m torch.distributed.run \
    --standalone --nproc-per-node "$gpus" "$root/examples/train_ddp.py" \
    --train "$d/digits-train-{0000..0004}.tar" --epochs 2 --workers 2 --checkpoint "$d/ddp.pt")
  local rc=$?
  ((rc == 0)) || return $rc
  local n shas
  n=$(grep -c '^rank [0-9]*: weights ' "$STEP_LOG")
  shas=$(sed -n 's/^rank [0-9]*: weights \([0-9a-f]*\).*/\1/p' "$STEP_LOG" | sort -u | wc -l)
  if ((n != gpus || shas != 1)); then
    DETAIL="$n ranks printed their weights ($gpus GPUs), $shas different"
    return 1
  fi
  DETAIL="$gpus rank(s), NCCL, equal weights: $(grep -m1 '^rank 0: steps' "$STEP_LOG")"
}

do_data() {
  needs_gpu || return
  [ -f "$work/photos/photos-07.tar" ] && {
    DETAIL="made by an earlier step"
    return 0
  }
  # 400 distinct photos made on every core (scripts/gen-photo-jpegs.py is
  # slow), each used 5 times under its own key: decoding costs the same.
  local d=$work/photos s n=400 procs
  procs=$(nproc)
  ((procs <= 16)) || procs=16
  rm -rf "$d" && mkdir -p "$d"
  for ((s = 0; s < procs; s++)); do
    lim "$TORCH_PY" "$root/scripts/gen-photo-jpegs.py" "$d/src$s" --count $(((n + procs - 1) / procs)) \
      --seed $((s + 1)) >/dev/null &
  done
  wait
  lim "$TORCH_PY" - "$d" <<'PY' || return 1
import glob, io, os, sys, tarfile
d = sys.argv[1]
srcs = sorted(glob.glob(os.path.join(d, "src*", "*.jpg")))
assert len(srcs) >= 400, f"{len(srcs)} photos made, 400 wanted"
k = 0
for s in range(8):
    with tarfile.open(os.path.join(d, f"photos-{s:02d}.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
        for i in range(250):
            key = f"p{s}_{i:04d}"
            t.add(srcs[k % 400], arcname=key + ".jpg")
            cls = str(k % 10).encode()
            ti = tarfile.TarInfo(key + ".cls")
            ti.size = len(cls)
            t.addfile(ti, io.BytesIO(cls))
            k += 1
PY
  rm -rf "$d"/src*
  cat "$d"/*.tar >/dev/null
  DETAIL="8 shards of 250 (400 distinct photos of 500x375), $(du -sm "$d" | cut -f1) MB"
}

# bench MODELS: train_resnet.py on the photos, both feeders.
bench() {
  needs_python || return
  local runs
  runs=$((2 * $(tr ',' '\n' <<<"$1" | wc -l)))
  [ -f "$work/photos/photos-07.tar" ] || {
    DETAIL="no photo shards (the data step failed)"
    return 1
  }
  (cd "$build" && PYTHONPATH=$build/python:$PYEXTRA lim "$TORCH_PY" "$root/python/bench/train_resnet.py" \
    "$work"/photos/photos-0?.tar --models "$1" --feeders wds,torch-wds --steps "$steps" \
    --warmup 10 --batch-size 128 --workers "$workers" --budget $((STEP_LIMIT / (runs + 1))) \
    --json "$logs/bench.jsonl")
  local rc=$?
  DETAIL=$("$TORCH_PY" - "$logs/bench.jsonl" "$1" <<'PY' 2>/dev/null
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
want = sys.argv[2].split(",")
got = {(r["model"], r["feeder"]): r for r in rows if r["model"] in want}
parts = []
for m in want:
    w, t = got.get((m, "wds")), got.get((m, "torch-wds"))
    def fmt(r):
        if not r or r["images_per_s"] is None:
            return (r or {}).get("note") or "not run"
        return f'{r["images_per_s"]:,.0f}/s wait {r["data_wait_pct"]:.1f}%'
    s = f"{m}: wds {fmt(w)}, torch+webdataset {fmt(t)}"
    if w and t and w["images_per_s"] and t["images_per_s"]:
        s += f' ({w["images_per_s"] / t["images_per_s"]:.2f}x)'
    parts.append(s)
print("; ".join(parts))
PY
)
  return $rc
}
do_bench_feed() {
  bench none
}
# bench_script NAME ENV...: scripts/NAME on the photo shards, one quick round.
bench_script() {
  needs_python || return
  local name=$1
  shift
  [ -f "$work/photos/photos-07.tar" ] || {
    DETAIL="no photo shards (the data step failed)"
    return 1
  }
  # (lim is a function: env runs under it, not it under env)
  (cd "$build" && lim env PY="$TORCH_PY" PYTHONPATH="$PYEXTRA" JPEG_SHARDS="$(echo "$work"/photos/photos-0?.tar)" \
    RUNS=1 EPOCHS=1 "$@" "$root/scripts/$name" "$build" "$work/bench-data")
  local rc=$?
  DETAIL=$(grep -E '^ *[0-9]+ |^wds |^torchvision ' "$STEP_LOG" | tr -s ' ' | paste -sd';' | cut -c1-150)
  # on a GPU machine, a figure not measured is a failure of the check
  if ((rc == 0)) && grep -q 'not measured' "$STEP_LOG"; then
    DETAIL=$(grep -m1 -o 'not measured.*' "$STEP_LOG" | cut -c1-150)
    return 1
  fi
  return $rc
}
do_bench_device() {
  bench_script bench-gpu-loader.sh WORKERS="4 $workers"
}
do_bench_jpeg() {
  # ResNet-50's part is bench-train's
  local epochs=2
  ((!quick)) || epochs=1
  bench_script bench-gpu-jpeg.sh GPU_WORKERS=4 CPU_WORKERS="$workers" WDS_BENCH_NO_RESNET=1 EPOCHS="$epochs"
}

# The GPU decoder's pixels against the CPU path's and torchvision's.
do_pixels() {
  needs_python || return
  [ -f "$work/photos/photos-07.tar" ] || {
    DETAIL="no photo shards (the data step failed)"
    return 1
  }
  (cd "$build" && PYTHONPATH=$build/python:$PYEXTRA lim "$TORCH_PY" "$root/tests/gpu/pixels.py" \
    "$work"/photos/photos-0[01].tar --count 256)
  local rc=$?
  DETAIL=$(tail -1 "$STEP_LOG" | cut -c1-150)
  return $rc
}
# ResNet-50 in bf16 fed by wds with the GPU decoder (gpu_jpeg.py), then
# by wds with CPU decode and torch DataLoader + webdataset (train_resnet.py).
do_bench_train() {
  needs_python || return
  [ -f "$work/photos/photos-07.tar" ] || {
    DETAIL="no photo shards (the data step failed)"
    return 1
  }
  local gpu spec
  spec="$work/photos/photos-{00..07}.tar" # wds's brace pattern
  local all=$STEP_LIMIT
  (cd "$build" && STEP_LIMIT=$((all / 3)) && PYTHONPATH=$build/python:$PYEXTRA lim "$TORCH_PY" \
    "$root/python/bench/gpu_jpeg.py" resnet50 "$spec" --jpeg-decode gpu --workers 4 --steps "$steps" \
    --warmup 10) >"$logs/resnet50-gpu-decode.out" 2>&1
  local grc=$?
  cat "$logs/resnet50-gpu-decode.out"
  gpu=$(tail -1 "$logs/resnet50-gpu-decode.out")
  STEP_LIMIT=$((all - all / 3)) bench resnet50
  local rc=$?
  gpu=$("$TORCH_PY" -c 'import json, sys
r = json.loads(sys.argv[1])
print("wds gpu decode (4 workers) %s/s wait %.1f%%" % (format(r["samples_per_s"], ",.0f"), r["data_wait_pct"]))' "$gpu" 2>/dev/null || echo "wds gpu decode: failed")
  DETAIL="$gpu; $DETAIL"
  ((grc == 0)) || return $grc
  return $rc
}

# The plan, in the order of what the steps are worth: NAME|LIMIT|QUICK|
# FUNCTION|WHAT, limits in seconds (QUICK: the limit under --quick, 0: not
# run then). The limits sum to at most 500 s (240 s for --quick):
# tests/integration/gpu_scripts.sh checks --dry-run's sums.
plan=(
  "setup|15|15|do_setup|links the build tree's path, the library path"
  "python-ext|30|30|do_python_ext|compiles the Python extension (CUDA's runtime by -L); the Python steps need it"
  "ctest|60|60|do_ctest|ctest -L gpu: test_loader_gpu, test_trainer_gpu (its H2D ratio), test_jpeg_gpu_device"
  "pytest-gpu|45|45|do_pytest|pytest -m gpu python/tests, against the extension built here"
  "bench-data|35|35|do_data|2,000 photo-like JPEGs (400 made by scripts/gen-photo-jpegs.py, each 5 times) in 8 shards"
  "pixels|25|25|do_pixels|tests/gpu/pixels.py: GPU decode against the CPU path and torchvision decode_jpeg(device=cuda)"
  "bench-jpeg|55|30|do_bench_jpeg|scripts/bench-gpu-jpeg.sh: GPU decode photos/s and CPU threads against the CPU path and torchvision"
  "bench-device|30|0|do_bench_device|scripts/bench-gpu-loader.sh: Loader(device=) against its host batches and torch + webdataset"
  "bench-train|70|0|do_bench_train|ResNet-50 bf16 fed by wds (GPU decode, CPU decode) and torch + webdataset: images/s, data-wait"
  "train-ddp|30|0|do_ddp|examples/train_ddp.py under torchrun, one process per GPU, NCCL"
  "train-gpu|40|0|do_train_gpu|ctest -R tools_train_gpu: train.sh and the README's demo on --device cuda"
  "memcheck-loader|20|0|do_memcheck_loader|compute-sanitizer memcheck --leak-check full on test_loader_gpu"
  "memcheck-trainer|25|0|do_memcheck_trainer|compute-sanitizer memcheck --leak-check full on test_trainer_gpu"
  "racecheck-loader|10|0|do_racecheck_loader|compute-sanitizer racecheck on test_loader_gpu"
  "racecheck-trainer|10|0|do_racecheck_trainer|compute-sanitizer racecheck on test_trainer_gpu"
)
total=0
for p in "${plan[@]}"; do
  IFS='|' read -r name limit qlimit fn what <<<"$p"
  ((quick)) && limit=$qlimit
  total=$((total + limit))
done
budget=${WDS_GPU_BUDGET:-$((total + 20))} # the margin: step start-up, the kill grace
if ((!dry)); then
  note "$(date -u +%FT%TZ): ${gpu_name:-$nogpu}; checkout $root; carry $carry; logs $logs"
fi
for p in "${plan[@]}"; do
  IFS='|' read -r name limit qlimit fn what <<<"$p"
  if ((quick)); then
    if ((qlimit == 0)); then
      record "$name" SKIP 0 "not in --quick"
      continue
    fi
    limit=$qlimit
  fi
  step "$name" "$limit" "$fn" "$what"
done
table | tee "$logs/table.txt"
echo "limits: $total s in all$( ((quick)) && echo " (--quick)"), budget $budget s"
rc=0
grep -q $'\t\(FAIL\|TIMEOUT\)\t' "$summary" && rc=1
((dry)) && rm -rf "$logs"
if ((!dry)) && [ -n "${OUT:-}" ]; then
  pack_logs || rc=1
fi
exit $rc
