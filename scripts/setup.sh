#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine is missing to build and test wds,
# then configures and builds into BUILD_DIR (default: build).
# Usage: scripts/setup.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
shift || true

pkgs="build-essential cmake pkg-config libarchive-dev libzstd-dev zlib1g-dev liblzma-dev
      libturbojpeg0-dev libpng-dev nettle-dev libarchive-tools tar gzip zstd xz-utils bzip2 python3
      python3-dev python3-numpy python3-pil python3-venv python3-sklearn libjpeg-turbo-progs
      clang-format file dpkg-dev libcurl4-openssl-dev libxml2-dev nginx curl openssl"
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

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
