#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine is missing to build and test wds
# (apt-get; with nvcc but no nvjpeg.h, also nvjpeg.h from PyPI's
# nvidia-nvjpeg wheel into WDS_NVJPEG_CACHE, default ~/.cache/wds/nvjpeg),
# then configures and builds into BUILD_DIR (default: build), as a Release
# build unless the extra cmake args give another CMAKE_BUILD_TYPE.
# Usage: scripts/setup.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true

pkgs="build-essential cmake pkg-config libarchive-dev libzstd-dev zlib1g-dev liblzma-dev
      libturbojpeg0-dev libpng-dev nettle-dev libarchive-tools tar gzip zstd xz-utils bzip2 python3
      python3-dev python3-numpy python3-pil python3-venv python3-sklearn libjpeg-turbo-progs
      clang-format file dpkg-dev libcurl4-openssl-dev libxml2-dev nginx curl openssl valgrind
      libopenmpi-dev openmpi-bin libmpich-dev mpich slurmctld slurmd slurm-client munge"
missing=()
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nvJPEG's header for the GPU JPEG decoder (loader/jpeg_gpu_cuda.cu): CUDA
# toolkits may lack it, PyPI's nvidia-nvjpeg wheel carries it. With nvcc and
# no nvjpeg.h, it is fetched once into WDS_NVJPEG_CACHE (~/.cache/wds/nvjpeg,
# where CMake looks); without it wds builds without the GPU decoder.
nvj_cache=${WDS_NVJPEG_CACHE:-$HOME/.cache/wds/nvjpeg}
if { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; } &&
  [ ! -f /usr/local/cuda/include/nvjpeg.h ] &&
  [ ! -f "$nvj_cache/nvidia/cu13/include/nvjpeg.h" ]; then
  tmp=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" \
    'nvidia-nvjpeg==13.0.*' >/dev/null 2>&1; then
    python3 - "$tmp" "$nvj_cache" <<'PYEOF'
import glob, sys, zipfile
z = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0])
for n in z.namelist():
    if n.endswith("/nvjpeg.h"):
        z.extract(n, sys.argv[2])
PYEOF
    echo "setup: nvjpeg.h from nvidia-nvjpeg in $nvj_cache" >&2
  else
    echo "setup: nvidia-nvjpeg could not be fetched: building without the GPU JPEG decoder" >&2
  fi
  rm -rf "$tmp"
fi

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
