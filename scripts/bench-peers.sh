#!/usr/bin/env bash
# wds against what users pick instead, and wds from Python against `wds bench`
# (docs/performance.md, "Python and the peers"). One command:
#   scripts/bench-peers.sh [BUILD_DIR] [DATA_DIR] [VENV_DIR]
# BUILD_DIR  a build with the tools and the Python extension (default: build;
#            a Release build: scripts/setup.sh build-rel -DWDS_WITH_CUDA=OFF)
# DATA_DIR   the loader benchmarks' data (default /tmp/wds-bench-data; made
#            as scripts/bench-loader.sh makes it, when missing)
# VENV_DIR   a virtual environment made here (default BUILD_DIR/peers-venv):
#            numpy, pillow, torch, webdataset==1.0.2 and nvidia-dali-cuda130
#            from the package index (PIP_* variables are passed to pip)
# Environment: RUNS (default 5) rounds; WORKERS (default "1 2") the worker
# (thread, process) counts; SECTIONS (default "ir jpeg raw").
#
# jpeg  2,000 photo-like JPEGs in 4 shards: decode, resize the shorter side
#       to 224, center crop 224x224, batches of 64, 1 warm-up epoch + 1
#       timed; per worker count, rounds alternating
#         wds bench --decode jpg:rgb:224,cls      (the C loop, reference)
#         wds.Loader from Python                  (python/bench/loader_overhead.py)
#         torch DataLoader + webdataset 1.0.2     (python/bench/peers.py torch-wds)
#         DALI CPU pipeline                       (python/bench/peers.py dali-jpeg)
# raw   the 100k set (4 x 1,000 x 100 KB) and the 1k set (2 x 50,000 x 1 KB):
#       raw .bin fields, batches of 256, shuffle buffer 10,000, 1 warm-up
#       epoch + 3 timed; per set and worker count, rounds alternating
#         cat SHARDS > /dev/null                  (the page-cache limit)
#         wds bench --decode bin                  (the C loop)
#         wds.Loader from Python
#         DALI fn.readers.webdataset alone        (python/bench/peers.py dali-raw)
# ir    instructions (valgrind --tool=callgrind, per thread; not wall time,
#       so neighbours on a shared machine do not move them) of the consumer
#       thread per batch: wds.Loader from Python (touching each field) against
#       `wds bench`'s C loop, and the loader's own threads beside them; one
#       shard of the 1k set (196 batches of 256 x 1 KB), workers 1, the
#       difference between a 1-epoch and a 2-epoch run (start-up cancels).
# Every figure is the median of RUNS; a ratio is the median of the per-round
# ratios. The Python consumer takes every field of every batch (a numpy
# array, or the bytes field's sequence and one item of it) before releasing
# it; DALI's consumer takes its outputs as numpy arrays; torch's the tensors.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib-bench.sh"
bench_check_devnull bench-peers.sh
BUILD=$(cd "${1:-$root/build}" 2>/dev/null && pwd) || {
  echo "bench-peers.sh: no build directory ${1:-$root/build}" >&2
  exit 1
}
DATA=${2:-/tmp/wds-bench-data}
VENV=${3:-$BUILD/peers-venv}
RUNS=${RUNS:-5}
WORKERS=${WORKERS:-1 2}
SECTIONS=${SECTIONS:-ir jpeg raw}
WDS=$BUILD/tools/wds
PYB=$root/python/bench
die() {
  echo "bench-peers.sh: $*" >&2
  exit 1
}
fail() { die "$@"; } # for venv_ensure
source "$root/tests/lib-venv.sh"
[ -x "$WDS" ] || die "build first: $WDS"
ls "$BUILD"/python/wds/_wds*.so >/dev/null 2>&1 ||
  die "no Python extension in $BUILD/python/wds (python3-dev missing when it was configured?)"
# The interpreter the extension was built for.
PY3=$(sed -n 's/^_\{0,1\}Python3_EXECUTABLE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" | head -n 1)
PY3=${PY3:-python3}

venv_ensure "$VENV" "$PY3" "numpy, PIL, torch, webdataset" \
  numpy pillow torch webdataset==1.0.2
PY=$VENV/bin/python
export PYTHONPATH=$BUILD/python
"$PY" -c 'import wds' || die "$PY cannot import the extension in $BUILD/python"
# DALI apart: when it cannot be installed or run, its rows say why and the
# rest is measured.
DALI=""
if ! "$PY" -c 'import nvidia.dali' 2>/dev/null; then
  if ! out=$("$PY" -m pip install -q --disable-pip-version-check nvidia-dali-cuda130 2>&1); then
    DALI="pip install nvidia-dali-cuda130 failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
  fi
fi
if [ -z "$DALI" ] && ! out=$("$PY" -c 'import nvidia.dali as d; print(d.__version__)' 2>&1); then
  DALI="import nvidia.dali failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
fi
[ -n "$DALI" ] && echo "DALI not measured: $DALI"

bench_synth_sets "$WDS" "$DATA"
bench_photo_jpegs "$PY" "$root" "$DATA"
jpegs=$DATA/photo-jpegs
# DALI's reader indexes each shard at start-up unless given its index
# (wds2idx, shipped with DALI): made once, so that start-up stays short.
IDX=$DATA/dali-idx
if [ -z "$DALI" ]; then
  mkdir -p "$IDX"
  for t in "$DATA"/100k-0?.tar "$DATA"/1k-0?.tar "$jpegs"/photos-0?.tar; do
    i=$IDX/$(basename "$t" .tar).idx
    [ -s "$i" ] || "$VENV/bin/wds2idx" "$t" "$i" >/dev/null ||
      die "wds2idx $t failed"
  done
fi
cat "$DATA"/*.tar "$jpegs"/*.tar >/dev/null

echo "bench-peers.sh: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "RUNS=$RUNS; $("$PY" -c 'import sys, numpy, PIL, torch, webdataset; print("Python", sys.version.split()[0], "numpy", numpy.__version__, "pillow", PIL.__version__, "torch", torch.__version__, "webdataset", webdataset.__version__)')" \
  "${DALI:+(no DALI)}$([ -z "$DALI" ] && "$PY" -c 'import nvidia.dali as d; print("DALI", d.__version__)')"

json_rate() { "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["samples_per_s"])'; }
now() { echo "${EPOCHREALTIME/,/.}"; }
ERR=$(mktemp)
trap 'rm -f "$ERR"' EXIT
# run NAME CMD...: samples/s of one run (the JSON line's samples_per_s); a
# failure stops the script with the command's error output.
run() {
  local name=$1
  shift
  local out
  if ! out=$("$@" 2>"$ERR"); then
    tail -n 20 "$ERR" >&2
    die "$name failed: $*"
  fi
  json_rate <<<"$out"
}
# cat_rate FILES...: tar bytes/s of `cat FILES > /dev/null`.
cat_rate() {
  local t0 t1 bytes
  bytes=$(stat -c %s "$@" | awk '{s += $1} END {print s}')
  t0=$(now)
  cat "$@" >/dev/null
  t1=$(now)
  "$PY" -c "print($bytes / ($t1 - $t0))"
}
med() { tr ' ' '\n' <<<"$1" | grep . | bench_median; }
# ratios A B: the median of the per-round ratios A[i] / B[i].
ratios() {
  "$PY" -c "
import statistics, sys
a, b = [list(map(float, s.split())) for s in sys.argv[1:3]]
print(statistics.median([x / y for x, y in zip(a, b)]))" "$1" "$2"
}
fmt() { "$PY" -c "import sys; print(format(float(sys.argv[1]), sys.argv[2]))" "$1" "$2"; }

if [[ " $SECTIONS " == *" ir "* ]]; then
  echo
  echo "== instructions per batch (callgrind; 1k-00.tar, batches of 256 x 1 KB, shuffle 10000, 1 worker)"
  if ! command -v valgrind >/dev/null; then
    echo "   not measured: no valgrind (apt-get install valgrind)"
  else
    CG=$(mktemp -d)
    # cg TAG EPOCHS CMD...: the per-thread totals of one run, "T1 T2 ...".
    cg() {
      local tag=$1 e=$2
      shift 2
      valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$CG/$tag.$e.%p" \
        "$@" >"$CG/$tag.$e.json" 2>"$ERR" || {
        tail -n 20 "$ERR" >&2
        die "valgrind $* failed"
      }
      local f
      for f in "$CG/$tag.$e".*-[0-9][0-9]; do
        sed -n 's/^\(summary\|totals\): *//p' "$f" | head -n 1
      done | tr '\n' ' '
    }
    one="$DATA/1k-00.tar"
    for tag in c py; do
      for e in 1 2; do
        if [ $tag = c ]; then
          t=$(cg c $e "$WDS" bench --json "$one" --decode bin --batch-size 256 --shuffle-buffer 10000 \
            --workers 1 --epochs $e)
        else
          t=$(cg py $e "$PY" "$PYB/loader_overhead.py" "$one" bin 256 --workers 1 \
            --shuffle-buffer 10000 --epochs $e --touch arrays)
        fi
        eval "IR_${tag}_$e=\"\$t\""
      done
    done
    rm -rf "$CG"
    # Thread 1 is the consumer (main); the others are the loader's (worker,
    # collator; the threads of a 2-epoch run are the same code twice).
    "$PY" - "$IR_c_1" "$IR_c_2" "$IR_py_1" "$IR_py_2" <<'PYEOF'
import sys
c1, c2, p1, p2 = [list(map(int, s.split())) for s in sys.argv[1:5]]
batches = 196  # ceil(50,000 / 256): one epoch
cons_c, cons_p = (c2[0] - c1[0]) / batches, (p2[0] - p1[0]) / batches
pipe_c = (sum(c2[1:]) - sum(c1[1:])) / batches
pipe_p = (sum(p2[1:]) - sum(p1[1:])) / batches
print(f"consumer thread: wds bench {cons_c:,.0f}  wds.Loader {cons_p:,.0f} instructions/batch")
print(f"loader threads:  wds bench {pipe_c:,.0f}  wds.Loader {pipe_p:,.0f} instructions/batch")
print(f"   Python's extra work: {(cons_p - cons_c) / pipe_c:.1%} of the loader's instructions"
      f" (the ratio if every instruction cost the same and the cores were all busy:"
      f" {pipe_c / (pipe_c + cons_p - cons_c):.3f})")
PYEOF
  fi
fi

if [[ " $SECTIONS " == *" jpeg "* ]]; then
  spec="$jpegs/photos-{00..03}.tar"
  shards=("$jpegs"/photos-0{0,1,2,3}.tar)
  echo
  echo "== JPEG: decode + resize shorter side + center crop 224, batches of 64 (images/s; medians of $RUNS rounds)"
  for w in $WORKERS; do
    C="" P="" T="" D=""
    for r in $(seq "$RUNS"); do
      C+=" $(run "wds bench" "$WDS" bench --json --warmup-epochs 1 "$spec" --decode jpg:rgb:224,cls \
        --batch-size 64 --workers "$w" --epochs 1)"
      P+=" $(run "wds.Loader" "$PY" "$PYB/loader_overhead.py" "$spec" jpg:rgb:224,cls 64 \
        --workers "$w" --epochs 1 --warmup-epochs 1 --touch arrays)"
      T+=" $(run "torch+webdataset" "$PY" "$PYB/peers.py" torch-wds "${shards[@]}" --workers "$w" \
        --batch-size 64 --warmup-epochs 1 --epochs 1)"
      if [ -z "$DALI" ]; then
        D+=" $(run "DALI" "$PY" "$PYB/peers.py" dali-jpeg "${shards[@]}" --index-dir "$IDX" \
          --workers "$w" --batch-size 64 --warmup-epochs 1 --epochs 1)"
      fi
      echo "#   workers=$w round $r (images/s): wds bench ${C##* }  wds.Loader ${P##* }  torch+webdataset ${T##* }  DALI ${D##* }"
    done
    printf 'workers=%s  wds bench %s  wds.Loader %s  torch+webdataset %s  DALI %s\n' "$w" \
      "$(fmt "$(med "$C")" .0f)" "$(fmt "$(med "$P")" .0f)" "$(fmt "$(med "$T")" .0f)" \
      "$([ -n "$D" ] && fmt "$(med "$D")" .0f || echo -)"
    printf '   wds.Loader / wds bench %s (target >= 0.95)   wds.Loader / torch+webdataset %s (target >= 2)' \
      "$(fmt "$(ratios "$P" "$C")" .3f)" "$(fmt "$(ratios "$P" "$T")" .2f)"
    if [ -n "$D" ]; then
      printf '   wds.Loader / DALI %s (target >= 1.5)   wds bench / DALI %s' \
        "$(fmt "$(ratios "$P" "$D")" .2f)" "$(fmt "$(ratios "$C" "$D")" .2f)"
    fi
    echo
  done
fi

if [[ " $SECTIONS " == *" raw "* ]]; then
  echo
  echo "== raw: .bin fields, batches of 256, shuffle buffer 10000 (samples/s; GB/s of tar; fraction of cat; medians of $RUNS rounds)"
  for set in 100k 1k; do
    if [ $set = 100k ]; then shards=("$DATA"/100k-0{0,1,2,3}.tar); else shards=("$DATA"/1k-0{0,1}.tar); fi
    spec="$DATA/$set-{00..0$((${#shards[@]} - 1))}.tar"
    nsamples=$("$PY" -c "print({'100k': 4000, '1k': 100000}['$set'])")
    bps=$(stat -c %s "${shards[@]}" | awk -v n="$nsamples" '{s += $1} END {print s / n}')
    for w in $WORKERS; do
      K="" C="" P="" D=""
      for r in $(seq "$RUNS"); do
        K+=" $("$PY" -c "print($(cat_rate "${shards[@]}") / $bps)")"
        C+=" $(run "wds bench" "$WDS" bench --json --warmup-epochs 1 "$spec" --decode bin \
          --batch-size 256 --shuffle-buffer 10000 --workers "$w" --epochs 3)"
        P+=" $(run "wds.Loader" "$PY" "$PYB/loader_overhead.py" "$spec" bin 256 --workers "$w" \
          --shuffle-buffer 10000 --epochs 3 --warmup-epochs 1 --touch arrays)"
        if [ -z "$DALI" ]; then
          D+=" $(run "DALI" "$PY" "$PYB/peers.py" dali-raw "${shards[@]}" --index-dir "$IDX" \
            --workers "$w" --batch-size 256 --shuffle-buffer 10000 --warmup-epochs 1 --epochs 3)"
        fi
        echo "#   $set workers=$w round $r (samples/s): cat $(fmt "${K##* }" .0f)  wds bench ${C##* }  wds.Loader ${P##* }  DALI ${D##* }"
      done
      gbs() { "$PY" -c "print(format($1 * $bps / 1e9, '.2f'))"; }
      frac() { fmt "$(ratios "$1" "$K")" .3f; }
      printf '%s workers=%s  cat %s GB/s | wds bench %s samples/s %s GB/s (%s of cat) | wds.Loader %s samples/s %s GB/s (%s of cat) | DALI %s\n' \
        "$set" "$w" "$(gbs "$(med "$K")")" \
        "$(fmt "$(med "$C")" .0f)" "$(gbs "$(med "$C")")" "$(frac "$C")" \
        "$(fmt "$(med "$P")" .0f)" "$(gbs "$(med "$P")")" "$(frac "$P")" \
        "$([ -n "$D" ] && echo "$(fmt "$(med "$D")" .0f) samples/s $(gbs "$(med "$D")") GB/s ($(frac "$D") of cat)" || echo -)"
      printf '   wds.Loader / wds bench %s (target >= 0.95 on 1k)' "$(fmt "$(ratios "$P" "$C")" .3f)"
      [ -n "$D" ] && printf '   wds bench / DALI %s   wds.Loader / DALI %s' \
        "$(fmt "$(ratios "$C" "$D")" .2f)" "$(fmt "$(ratios "$P" "$D")" .2f)"
      echo
    done
  done
fi
