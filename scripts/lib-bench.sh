#!/usr/bin/env bash
# lib-bench.sh — shared by the benchmark scripts (sourced, not run).
#
#   source "$(dirname "$0")/lib-bench.sh"
#   bench_check_devnull bench-read.sh
#
# bench_check_devnull NAME: the benchmarks send measured output to
# /dev/null. If /dev/null is not the null device (a character device,
# 1:3 on Linux) — e.g. a tool run as root once renamed a regular file over
# it — that output lands on disk and every figure is wrong: refuse to
# measure. WDS_BENCH_DEVNULL names another path to check (for the tests).
bench_check_devnull() {
  local name=$1 dev=${WDS_BENCH_DEVNULL:-/dev/null} kind
  kind=$(stat -L -c '%F %t:%T' "$dev" 2>/dev/null || echo "missing")
  if [ "$kind" != "character special file 1:3" ]; then
    {
      echo "$name: $dev is not the null device (it is: $kind), so output"
      echo "  sent there is written somewhere and the measurements would be wrong."
      echo "  Restore it (as root): rm -f /dev/null && mknod -m 666 /dev/null c 1 3"
    } >&2
    exit 1
  fi
}

# bench_median: the median of the numbers on stdin, one a line.
bench_median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# bench_synth_sets WDS DATA: the loader benchmarks' synthetic sets in DATA,
# made with `wds synth` unless already there with the same parameters:
#   100k-{00..03}.tar  4 x 1,000 samples, a 102,400-byte .bin each
#   1k-{00..01}.tar    2 x 50,000 samples, a 1,024-byte .bin each
bench_synth_sets() {
  local wds=$1 data=$2
  _bench_synth() { # name shards samples size seed
    [ -f "$data/$1-00.tar" ] && [ "$(cat "$data/$1.loader-params" 2>/dev/null)" = "$*" ] && return
    "$wds" synth --shards "$2" --samples "$3" --size "$4" --seed "$5" "$data/$1-%02d.tar" >/dev/null
    echo "$*" >"$data/$1.loader-params"
  }
  mkdir -p "$data"
  _bench_synth 100k 4 1000 102400 1
  _bench_synth 1k 2 50000 1024 2
}

# bench_photo_jpegs PYTHON ROOT DATA: DATA/photo-jpegs: 2,000 photo-like
# JPEGs (scripts/gen-photo-jpegs.py --seed 1: 500x375, quality 90) and the
# same packed into photos-{00..03}.tar (500 samples each: .jpg + .cls, the
# class i % 10, sorted by name), made once.
bench_photo_jpegs() {
  local py=$1 root=$2 jpegs=$3/photo-jpegs
  [ -f "$jpegs/done" ] && return
  rm -rf "$jpegs"
  "$py" "$root/scripts/gen-photo-jpegs.py" "$jpegs" --count 2000 --seed 1 >/dev/null
  "$py" - "$jpegs" <<'PYEOF'
import io, os, sys, tarfile
d = sys.argv[1]
names = sorted(n for n in os.listdir(d) if n.endswith(".jpg"))
for s in range(4):
    with tarfile.open(os.path.join(d, f"photos-{s:02d}.tar"), "w", format=tarfile.USTAR_FORMAT) as t:
        for i, n in enumerate(names[s * 500:(s + 1) * 500]):
            key = f"p{s}_{i:04d}"
            t.add(os.path.join(d, n), arcname=key + ".jpg")
            cls = str(i % 10).encode()
            ti = tarfile.TarInfo(key + ".cls"); ti.size = len(cls)
            t.addfile(ti, io.BytesIO(cls))
PYEOF
  touch "$jpegs/done"
}

# bench_jpeg_set PYTHON ROOT DATA: the photo JPEG shards of the GPU
# benchmarks in JPEG_TARS (an array) and JPEG_SPEC (the same as one spec,
# joined with ::): those JPEG_SHARDS names (space-separated; gpu-run.sh
# passes its own), else bench_photo_jpegs' four, made once in DATA.
bench_jpeg_set() {
  if [ -n "${JPEG_SHARDS:-}" ]; then
    read -r -a JPEG_TARS <<<"$JPEG_SHARDS"
  else
    bench_photo_jpegs "$1" "$2" "$3"
    JPEG_TARS=("$3"/photo-jpegs/photos-0{0,1,2,3}.tar)
  fi
  local IFS=:
  JPEG_SPEC=$(sed 's/:/::/g' <<<"${JPEG_TARS[*]}")
  cat "${JPEG_TARS[@]}" >/dev/null
}

# bench_gpu_setup NAME BUILD_ARG: the prelude of the GPU benchmarks
# (bench-gpu-loader.sh, bench-gpu-jpeg.sh): BUILD from BUILD_ARG (default
# ROOT/build), PY (default /opt/torch/.venv/bin/python3, else python3), PYB,
# bench_die(), PYTHONPATH with BUILD/python first; without a CUDA GPU for PY it
# says "NAME: not measured" and exits 0; a PY that cannot import wds dies.
# Needs root set. bench_run CMD...: samples/s of one run (its last JSON
# line's samples_per_s), dying with the command on a failure.
bench_gpu_setup() {
  BENCH_NAME=$1
  BUILD=$(cd "${2:-$root/build}" 2>/dev/null && pwd) || {
    echo "$BENCH_NAME: no build directory ${2:-$root/build}" >&2
    exit 1
  }
  PY=${PY:-/opt/torch/.venv/bin/python3}
  [ -x "$PY" ] || PY=python3
  PYB=$root/python/bench
  export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
  if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "$BENCH_NAME: not measured: no CUDA GPU for $PY (no torch, or torch.cuda.is_available() is false)"
    exit 0
  fi
  "$PY" -c 'import wds' || bench_die "$PY cannot import wds from $BUILD/python"
}
bench_die() {
  echo "${BENCH_NAME:-bench}: $*" >&2
  exit 1
}
bench_run() {
  local out
  out=$("$@") || bench_die "failed: $*"
  "$PY" -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["samples_per_s"])' <<<"$out"
}
