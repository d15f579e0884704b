#!/usr/bin/env bash
# The GPU checks, part 2 of 2: run in the checkout copied to a GPU machine,
# with the folder scripts/gpu-prepare.sh made (gpu-carry/) carried along.
# No package access and no build there: it links the build tree to the path
# it was built at, sets the library path (CUDA's, NCCL's from the torch
# venv, the carried libraries), compiles the Python extension against that
# machine's Python and the carried libwds.a, then runs, each step under a
# time limit and all of it within a budget (default 540 s):
#   ctest -L gpu           test_loader_gpu, test_trainer_gpu (the H2D ratio
#                          against plain pinned cudaMemcpy comes from its
#                          output), then tools_train_gpu (train.sh and the
#                          README's demo on --device cuda) as its own step
#   memcheck, racecheck    compute-sanitizer on test_loader_gpu and
#                          test_trainer_gpu (memcheck with --leak-check
#                          full and tests/gpu/compute-sanitizer.supp.xml),
#                          judged by scripts/sanitizer-check.py: no error and
#                          no leak of ours; NCCL's own are counted
#   pytest -m gpu          python/tests' GPU tests, against the extension
#   train_ddp.py           examples/train_ddp.py under torchrun, one process
#                          per GPU, NCCL: equal steps and weights on every rank
#   benchmarks             python/bench/train_resnet.py on photo-like JPEG
#                          shards made there: loader to GPU (wds against
#                          torch DataLoader + webdataset), then ResNet-18 and
#                          ResNet-50 in bf16 fed by each, images/s and
#                          data-wait; scripts/bench-gpu-loader.sh (device=
#                          against host batches) and bench-gpu-jpeg.sh
#                          (nvJPEG against the CPU path and torchvision)
# and prints one table. Without a GPU (nvidia-smi lists none) every GPU step
# is reported as skipped and the script exits 0; --dry-run prints the steps
# and their limits without running anything. Exit status: 1 when a step
# failed or ran out of time, else 0.
#
# Usage: scripts/gpu-run.sh [--dry-run] [--only STEP,...] [CARRY_DIR]
#   (CARRY_DIR default: gpu-carry; --only runs those steps, set-up always,
#   e.g. --only bench-data,bench-feed,bench-train to run the benchmarks again)
# Environment: OUT (logs go to $OUT/gpu-run when set, else CARRY_DIR/logs),
# WDS_GPU_BUDGET (seconds, default 540), TORCH_PY (default
# /opt/torch/.venv/bin/python3, else python3), BENCH_STEPS (default 50),
# WORKERS (default: cores - 1, at most 15).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dry=0
only=
while (($#)); do
  case $1 in
  --dry-run) dry=1 ;;
  --only) only=,${2:?--only STEP,...},; shift ;;
  --only=*) only=,${1#--only=}, ;;
  -*) echo "usage: gpu-run.sh [--dry-run] [--only STEP,...] [CARRY_DIR]" >&2; exit 2 ;;
  *) break ;;
  esac
  shift
done
carry=${1:-$root/gpu-carry}
budget=${WDS_GPU_BUDGET:-540}
t_start=$SECONDS
logs=${OUT:+$OUT/gpu-run}
logs=${logs:-$carry/logs}
if ((dry)); then logs=$(mktemp -d "${TMPDIR:-/tmp}/wds-gpu-run.XXXXXX"); fi
mkdir -p "$logs" || exit 1
summary=$logs/summary.tsv
: >"$summary"
note() { echo "gpu-run: $*"; }

# ---- the table ----------------------------------------------------------------
# record STEP RESULT SECONDS DETAIL
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$summary"; }
table() {
  echo
  echo "== GPU checks: $(date -u +%FT%TZ), ${gpu_name:-no GPU}, $((SECONDS - t_start)) s of $budget; $( ((dry)) && echo "dry run" || echo "logs in $logs")"
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
steps=${BENCH_STEPS:-50}
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
check=$root/scripts/sanitizer-check.py
supp=$root/tests/gpu/compute-sanitizer.supp.xml
setup_ok=0

# step NAME LIMIT FUNCTION WHAT: runs FUNCTION (which sets DETAIL and
# returns 0 pass, 77 skip, else fail) under LIMIT seconds (less when the
# budget is nearly spent) with its output in $logs/NAME.log, and records
# the row.
DETAIL=
step() {
  local name=$1 limit=$2 fn=$3 what=$4 left rc t0
  left=$((budget - (SECONDS - t_start) - 5))
  if [ -n "$only" ] && [ "$name" != setup ] && [[ $only != *",$name,"* ]]; then
    record "$name" SKIP 0 "not selected (--only)"
    return
  fi
  if ((dry)); then
    record "$name" SKIP 0 "dry run, at most ${limit} s: $what"
    return
  fi
  if ((left < 10)); then
    record "$name" SKIP 0 "out of time (budget $budget s)"
    return
  fi
  ((limit <= left)) || limit=$left
  DETAIL=
  t0=$SECONDS
  note "$name (at most ${limit} s)"
  STEP_LIMIT=$limit
  STEP_LOG=$logs/$name.log
  "$fn" >"$STEP_LOG" 2>&1
  rc=$?
  local took=$((SECONDS - t0))
  [ -n "$DETAIL" ] || DETAIL=$(grep -v '^\s*$' "$logs/$name.log" | tail -1 | cut -c1-150)
  case $rc in
  0) record "$name" PASS "$took" "$DETAIL" ;;
  77) record "$name" SKIP "$took" "$DETAIL" ;;
  124 | 137) record "$name" TIMEOUT "$took" "over ${limit} s: $DETAIL" ;;
  *) record "$name" FAIL "$took" "$DETAIL (exit $rc)" ;;
  esac
}
# lim CMD...: CMD under the step's limit (SIGTERM, then SIGKILL 10 s later).
lim() { timeout -k 10 "$STEP_LIMIT" "$@"; }
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
  # The GPU JPEG decoder's libnvjpeg: the carried one (the header's version).
  for d in "$carry"/lib/libnvjpeg.so.*; do
    [ -e "$d" ] && export WDS_NVJPEG_LIBRARY=$d && break
  done
  echo "libnvjpeg: ${WDS_NVJPEG_LIBRARY:-not carried (looked for in CUDA and the torch venv)}"
  echo "CUDA libraries: ${cuda_lib:-none found}; NCCL: ${nccl_lib:-none found}; carried: $(ls "$carry/lib" | tr '\n' ' ')"
  echo "python: $TORCH_PY ($("$TORCH_PY" -V 2>&1))"
  # The extension: python/wds/_*.c (the files python/CMakeLists.txt lists)
  # against this Python, the carried libwds.a and the libraries CMake linked
  # it with (here, or carried).
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
  out=$build/python/wds
  mkdir -p "$out" && cp "$root"/python/wds/*.py "$out/" || return 1
  local cc=${CC:-cc}
  command -v "$cc" >/dev/null 2>&1 || cc=gcc
  lim "$cc" -std=c11 -O2 -fPIC -fvisibility=hidden -D_GNU_SOURCE -shared \
    -I"$root/include" -I"$build/include" -I"$inc" "$root"/python/wds/_*.c \
    -o "$out/_wds$ext" "$build/libwds.a" "${libs[@]}" -lstdc++ -Wl,--exclude-libs,ALL \
    -Wl,-rpath,"${cuda_lib:+$cuda_lib:}$carry/lib" || {
    DETAIL="compiling the extension failed"
    return 1
  }
  (cd "$build" && PYTHONPATH=$build/python lim "$TORCH_PY" -c 'import wds; print("import wds:", wds.__file__)') || {
    DETAIL="the extension does not import"
    return 1
  }
  # Pure-Python packages carried for what this venv lacks (never shadowing its own).
  PYEXTRA=$logs/pylib
  rm -rf "$PYEXTRA" && mkdir -p "$PYEXTRA"
  if [ -d "$carry/pylib" ]; then
    for d in "$carry"/pylib/*; do
      b=$(basename "$d")
      case $b in *.dist-info | __pycache__ | bin) continue ;; esac
      "$TORCH_PY" -c "import ${b%.py}" 2>/dev/null || ln -s "$d" "$PYEXTRA/$b"
    done
  fi
  echo "carried Python packages used: $(ls "$PYEXTRA" | tr '\n' ' ')"
  setup_ok=1
  DETAIL="extension built for $("$TORCH_PY" -V 2>&1); CUDA libraries ${cuda_lib:-not found}; NCCL ${nccl_lib:-not found}"
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
  DETAIL="$(grep -E '[0-9]+% tests passed' "$STEP_LOG" | tail -1)${h2d:+; H2D ratio $h2d of plain pinned cudaMemcpy (target 0.8)}"
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
  needs_gpu || return
  "$TORCH_PY" -c 'import pytest' 2>/dev/null || PYTHONPATH=$PYEXTRA "$TORCH_PY" -c 'import pytest' 2>/dev/null || {
    DETAIL="no pytest in $TORCH_PY's venv, none carried"
    return 77
  }
  (cd "$build" && PYTHONPATH=$build/python:$PYEXTRA WDS_TEST_CLI=$build/tools/wds \
    lim "$TORCH_PY" -m pytest -q -p no:cacheprovider -m gpu "$root/python/tests")
  local rc=$?
  if ((rc == 5)); then
    DETAIL="no test marked gpu in python/tests"
    return 77
  fi
  DETAIL=$(grep -E '[0-9]+ (passed|failed)' "$STEP_LOG" | tail -1)
  return $rc
}

do_ddp() {
  needs_gpu || return
  local d=$logs/ddp-data out
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
  # 400 distinct photos made on every core (scripts/gen-photo-jpegs.py is
  # slow), each used 5 times under its own key: decoding costs the same.
  local d=$logs/photos s n=400 procs
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
  needs_gpu || return
  local runs
  runs=$((2 * $(tr ',' '\n' <<<"$1" | wc -l)))
  [ -f "$logs/photos/photos-07.tar" ] || {
    DETAIL="no photo shards (the data step failed)"
    return 1
  }
  (cd "$build" && PYTHONPATH=$build/python:$PYEXTRA lim "$TORCH_PY" "$root/python/bench/train_resnet.py" \
    "$logs"/photos/photos-0?.tar --models "$1" --feeders wds,torch-wds --steps "$steps" \
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
  needs_gpu || return
  local name=$1
  shift
  [ -f "$logs/photos/photos-07.tar" ] || {
    DETAIL="no photo shards (the data step failed)"
    return 1
  }
  (cd "$build" && env PY="$TORCH_PY" PYTHONPATH="$PYEXTRA" JPEG_SHARDS="$(echo "$logs"/photos/photos-0?.tar)" \
    RUNS=1 EPOCHS=1 "$@" lim "$root/scripts/$name" "$build" "$logs/bench-data")
  local rc=$?
  DETAIL=$(grep -E '^ *[0-9]+ ' "$STEP_LOG" | tr -s ' ' | paste -sd';' | cut -c1-150)
  return $rc
}
do_bench_device() {
  bench_script bench-gpu-loader.sh WORKERS="4 $workers"
}
do_bench_jpeg() {
  bench_script bench-gpu-jpeg.sh GPU_WORKERS=4 CPU_WORKERS="$workers" STEPS=30
}
do_bench_train() {
  bench resnet18,resnet50
}

if ((!dry)); then
  note "$(date -u +%FT%TZ): ${gpu_name:-$nogpu}; checkout $root; carry $carry; logs $logs"
fi
step setup 90 do_setup \
  "links the build tree's path, library path, compiles the Python extension"
step ctest 90 do_ctest \
  "ctest -L gpu: test_loader_gpu, test_trainer_gpu (and its H2D ratio)"
step train-gpu 180 do_train_gpu \
  "ctest -R tools_train_gpu: train.sh and the README's demo on --device cuda"
step memcheck-loader 45 do_memcheck_loader \
  "compute-sanitizer memcheck --leak-check full on test_loader_gpu"
step memcheck-trainer 120 do_memcheck_trainer \
  "compute-sanitizer memcheck --leak-check full on test_trainer_gpu"
step racecheck-loader 45 do_racecheck_loader \
  "compute-sanitizer racecheck on test_loader_gpu"
step racecheck-trainer 90 do_racecheck_trainer \
  "compute-sanitizer racecheck on test_trainer_gpu"
step pytest-gpu 90 do_pytest \
  "pytest -m gpu python/tests, against the extension built here"
step train-ddp 90 do_ddp \
  "examples/train_ddp.py under torchrun, one process per GPU, NCCL"
step bench-data 45 do_data \
  "2,000 photo-like JPEGs (400 made by scripts/gen-photo-jpegs.py, each 5 times) in 8 shards"
step bench-feed 75 do_bench_feed \
  "loader to GPU: wds against torch DataLoader + webdataset (python/bench/train_resnet.py --models none)"
step bench-train 150 do_bench_train \
  "ResNet-18 and ResNet-50 in bf16 fed by wds and by torch + webdataset, data-wait"
step bench-device 60 do_bench_device \
  "scripts/bench-gpu-loader.sh: Loader(device=) against its host batches and torch + webdataset"
step bench-jpeg 120 do_bench_jpeg \
  "scripts/bench-gpu-jpeg.sh: nvJPEG decode against the CPU path and torchvision, ResNet-50 data-wait"
table | tee "$logs/table.txt"
rc=0
grep -q $'\t\(FAIL\|TIMEOUT\)\t' "$summary" && rc=1
((dry)) && rm -rf "$logs"
exit $rc
