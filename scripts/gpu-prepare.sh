#!/usr/bin/env bash
# The GPU checks, part 1 of 2: run on a machine WITHOUT a GPU (the CUDA
# toolkit, cuBLAS and NCCL installed, as scripts/setup.sh leaves it), it
# prepares everything scripts/gpu-run.sh needs on a GPU machine that has
# nvcc, CUDA's libraries, torch (/opt/torch/.venv) and compute-sanitizer but
# no package access and none of Debian's image and compression libraries.
#
# Into CARRY_DIR (default: gpu-carry/ in the checkout, ignored by git; it
# must be inside the checkout, which is what the device tool carries; the
# cmake and build logs are left there too):
#   build/     a Release build with -DWDS_WITH_CUDA=ON for sm_80 and sm_90
#              (CMAKE_CUDA_ARCHITECTURES, default "80;90"; device line
#              info for compute-sanitizer), tests included, the Python
#              extension not (gpu-run.sh compiles it there, against that
#              machine's Python); object files removed, debug info stripped
#              (symbols kept: sanitizer backtraces);
#   lib/       the shared libraries the binaries need that are not glibc,
#              libstdc++/libgcc, zlib, CUDA or NCCL (libturbojpeg, libpng16,
#              libnettle, libzstd, liblzma), copied under their sonames;
#   pylib/     pure-Python packages the GPU machine's venv lacks (pytest and
#              its dependencies, webdataset, braceexpand, PyYAML), from the
#              package index (pip install --target); left out, with a
#              warning, when no index answers: those checks then skip;
#   origin     the checkout's absolute path here (the build tree's paths are
#              absolute: gpu-run.sh links it to wherever the checkout lands);
#   link-libs  the libraries the extension links beside libwds.a (CMake's
#              line for a target linking wds, CUDA's libraries left out);
#   link-cuda  -lcudart when libwds.a holds CUDA code (else empty):
#              gpu-run.sh links it from that machine's CUDA with -L;
#   manifest   what was carried and its size.
# The whole folder must stay under the device tool's 64 MiB: the script
# fails, with the largest files, when it does not.
#
# Then, with the device tool: carry ["gpu-carry"], command
#   "scripts/gpu-run.sh" (docs/performance.md, "GPU checks in one call").
# Usage: scripts/gpu-prepare.sh [CARRY_DIR]
#        scripts/gpu-prepare.sh --link-libs BUILD_DIR CARRY_DIR
#          (writes link-libs and link-cuda of BUILD_DIR only: the CI test of
#          the extension's link, tests/integration/gpu_scripts.sh)
# Environment: JOBS (default: nproc), CMAKE_CUDA_ARCHITECTURES, WDS_CMAKE_ARGS
# (more cmake options), PIP_* (passed to pip).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# link_libs BUILD CARRY: the extension's link line, as CMake makes it for a
# target linking wds (gpu-run.sh maps each library to the GPU machine's or
# the carried one), without CUDA's libraries: CMake adds -lcudadevrt
# -lcudart_static to every target linking a library with CUDA sources, and
# they are found only through links some machines have in /usr/local/lib.
# The extension needs CUDA's runtime only (libwds.a's CUDA objects), which
# gpu-run.sh links by -L from the GPU machine's CUDA (link-cuda). A target
# with CUDA sources links through a response file.
link_libs() {
  local b=$1 c=$2 link t
  link=
  for t in tests/CMakeFiles/test_loader_gpu.dir python/CMakeFiles/wds_python.dir tests/CMakeFiles/test_base.dir; do
    [ -f "$b/$t/link.txt" ] && { link=$b/$t; break; }
  done
  [ -n "$link" ] || { echo "gpu-prepare.sh: no target linking wds in $b" >&2; return 1; }
  { cat "$link/link.txt"; [ ! -f "$link/linkLibs.rsp" ] || cat "$link/linkLibs.rsp"; } |
    tr -d '"' | tr ' ' '\n' | awk 'f && NF; /libwds\.a$/ {f = 1}' |
    { grep -v -E '^-Wl,-rpath|^-L|^-lcuda|/libcuda[^/]*$|^-lnvrtc|/stubs/' || true; } >"$c/link-libs"
  [ -s "$c/link-libs" ] || { echo "gpu-prepare.sh: no libraries after libwds.a in $link's link line" >&2; return 1; }
  : >"$c/link-cuda"
  if nm -A "$b/libwds.a" 2>/dev/null | grep ' U cuda[A-Z]' >/dev/null; then # (not -q: pipefail)
    echo "-lcudart" >"$c/link-cuda"
  fi
}
if [ "${1:-}" = --link-libs ]; then
  link_libs "${2:?--link-libs BUILD_DIR CARRY_DIR}" "${3:?--link-libs BUILD_DIR CARRY_DIR}"
  exit
fi

carry=${1:-$root/gpu-carry}
mkdir -p "$carry"
carry=$(cd "$carry" && pwd)
case $carry in
"$root"/*) ;;
*)
  echo "gpu-prepare.sh: $carry is outside the checkout $root: the device tool carries folders of the checkout" >&2
  exit 2
  ;;
esac
build=$carry/build
rm -rf "$carry/logs" # gpu-run.sh's, when run without $OUT: not to be carried
archs=${CMAKE_CUDA_ARCHITECTURES:-80;90}
limit=$((64 * 1024 * 1024))
say() { echo "gpu-prepare: $*"; }

command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] ||
  { echo "gpu-prepare.sh: nvcc not found (the CUDA toolkit, in /usr/local/cuda)" >&2; exit 1; }

say "building $build (CUDA architectures $archs)"
# shellcheck disable=SC2086  # WDS_CMAKE_ARGS: options, split on purpose
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DWDS_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$archs" -DCMAKE_CUDA_FLAGS=-lineinfo -DWDS_PYTHON=OFF \
  -DWDS_WERROR=ON ${WDS_CMAKE_ARGS:-} >"$carry/cmake.log" ||
  { tail -20 "$carry/cmake.log" >&2; exit 1; }
grep -q '^WDS_TRAINER_CUDA:INTERNAL=ON\|wds: CUDA trainer backend ON' "$carry/cmake.log" "$build/CMakeCache.txt" ||
  { echo "gpu-prepare.sh: the CUDA trainer backend is not in this build (see $carry/cmake.log)" >&2; exit 1; }
cmake --build "$build" -j "${JOBS:-$(nproc)}" >"$carry/build.log" 2>&1 ||
  { tail -30 "$carry/build.log" >&2; exit 1; }
for t in tests/test_trainer_gpu tests/test_loader_gpu trainer/wds-train tools/wds libwds.a; do
  [ -e "$build/$t" ] || { echo "gpu-prepare.sh: $build/$t was not built" >&2; exit 1; }
done
# Both architectures are in the trainer's device code.
if command -v cuobjdump >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/cuobjdump ]; then
  cuobjdump=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
  for a in ${archs//;/ }; do
    a=${a%%-*}
    "$cuobjdump" --list-elf --list-ptx "$build/tests/test_trainer_gpu" 2>/dev/null | grep -q "sm_$a\|compute_$a" ||
      { echo "gpu-prepare.sh: no sm_$a code in test_trainer_gpu" >&2; exit 1; }
  done
fi

say "the libraries to carry"
rm -rf "$carry/lib"
mkdir -p "$carry/lib"
# Not carried: what any Linux with torch and CUDA has (glibc, the GCC
# runtime, zlib) and what the GPU machine brings (CUDA, cuBLAS, NCCL).
skip='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+|libz|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvrtc|libnvJitLink)\.so'
mapfile -t elves < <(find "$build" -type f -perm -u+x \( -name 'test_*' -o -name wds -o -name wds-train -o -name '*.so*' \) | sort)
for f in "${elves[@]}"; do
  file -b "$f" | grep -q '^ELF' || continue
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ $soname =~ $skip ]] && continue
  cp -L "$path" "$carry/lib/$soname"
done
ls "$carry/lib" | sed 's/^/  /'
for need in libturbojpeg.so.0 libpng16.so.16 libnettle.so.8 libzstd.so.1; do
  [ -e "$carry/lib/$need" ] || say "note: $need not among the binaries' libraries"
done

link_libs "$build" "$carry"
echo "$root" >"$carry/origin"

say "removing objects, stripping debug info"
find "$build" -name '*.o' -delete
find "$build" \( -name '*.d' -o -name 'depend.make' -o -name 'compiler_depend.*' \) -type f -delete
rm -rf "$build"/CMakeFiles/CMakeScratch "$build"/Testing "$build"/CMakeFiles/*/CompilerId*/tmp
for f in "${elves[@]}"; do
  [ -f "$f" ] && file -b "$f" | grep -q '^ELF' && strip --strip-debug "$f" 2>/dev/null || true
done
strip --strip-debug "$build/libwds.a" 2>/dev/null || true
# Not needed there and large: the shared library's copies, fuzz replays.
rm -f "$build"/libwds.so*

say "libnvjpeg (the GPU JPEG decoder's, loaded at run time) from PyPI's nvidia-nvjpeg"
nvj=$(mktemp -d)
if timeout 300 python3 -m pip download -q --disable-pip-version-check --no-deps -d "$nvj" \
  'nvidia-nvjpeg==13.0.*' >/dev/null 2>&1 &&
  python3 - "$nvj" "$carry/lib" <<'PY'
import glob, os, sys, zipfile
src, dst = sys.argv[1:3]
for whl in glob.glob(os.path.join(src, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if os.path.basename(n).startswith("libnvjpeg.so"):
                with open(os.path.join(dst, os.path.basename(n)), "wb") as f:
                    f.write(z.read(n))
PY
then
  ls "$carry/lib" | grep nvjpeg | sed 's/^/  /'
else
  say "warning: nvidia-nvjpeg not fetched: there, libnvjpeg is looked for in CUDA and the torch venv"
fi
rm -rf "$nvj"

say "pure-Python packages (pytest, webdataset) for the GPU machine's venv"
rm -rf "$carry/pylib"
py=$(command -v python3)
if out=$(timeout 300 "$py" -m pip install -q --disable-pip-version-check --no-deps \
  --no-compile --target "$carry/pylib" pytest pluggy iniconfig packaging \
  'webdataset==1.0.2' braceexpand pyyaml 2>&1); then
  find "$carry/pylib" -name '*.so' -delete # built for this Python: PyYAML falls back to pure Python
  rm -rf "$carry/pylib/bin"
else
  rm -rf "$carry/pylib"
  say "warning: pip failed, no pylib/ (pytest and torch+webdataset checks will skip there): $(tail -2 <<<"$out" | tr '\n' ' ')"
fi

size=$(du -sb "$carry" | cut -f1)
{
  echo "gpu-carry for $root, $(date -u +%FT%TZ), CUDA architectures $archs"
  echo "size $size bytes (limit $limit)"
  (cd "$carry" && find . -type f -size +1M -printf '%s %p\n' | sort -rn | head -15)
} >"$carry/manifest"
if ((size > limit)); then
  cat "$carry/manifest" >&2
  echo "gpu-prepare.sh: $carry is $size bytes, over the device tool's 64 MiB" >&2
  exit 1
fi
say "ready: $carry, $((size / 1024 / 1024)) MiB of 64"
say "on the GPU machine: scripts/gpu-run.sh (device tool: carry [\"${carry#"$root"/}\"])"
