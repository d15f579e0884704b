#!/usr/bin/env bash
# Package test: the C library as others use it.
#
#   * `wds --version` and `wds-train --version` print "wds VERSION", exit 0;
#   * `cmake --install` into a temporary prefix puts the headers, libwds.a,
#     libwds.so (SONAME libwds.so.MAJOR), wds, wds-train, wds.pc and the
#     CMake package there;
#   * tests/consumer/consumer.c (writes a shard with the writer, reads it
#     back, prints wds_version()) built against that tree with pkg-config,
#     shared and static (-Wl,-Bstatic -lwds and pkg-config --static), and
#     with find_package(wds) (wds::wds and wds::wds_static), runs and says
#     the expected line; the shared builds need libwds.so.MAJOR, the static
#     ones do not;
#   * find_package(wds 99) is refused (wdsConfigVersion.cmake);
#   * `cpack -G DEB` makes a package that declares its dependencies; unpacked
#     with dpkg-deb -x into a temporary root, the consumer builds against it
#     with pkg-config and runs, and its wds runs.
#
# In a sanitized build (WDS_SANITIZE, WDS_SANITIZE_THREAD) the consumers get
# the same -fsanitize flags (CONSUMER_FLAGS), as the library needs their
# run-time library.
#
# Usage: package.sh WDS_BINARY WDS_TRAIN_BINARY BUILD_DIR SOURCE_DIR VERSION
# Environment: CC, CMAKE, CPACK (default: from PATH), CONSUMER_FLAGS.
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup package "pkg-config readelf dpkg-deb" "$@"
(($# == 5)) || die "usage: package.sh WDS WDS_TRAIN BUILD_DIR SOURCE_DIR VERSION"
TRAIN=$2
BUILD=$3
SRC=$4
VERSION=$5
MAJOR=${VERSION%%.*}
CC=${CC:-cc}
CMAKE=${CMAKE:-cmake}
CPACK=${CPACK:-cpack}
read -r -a FLAGS <<<"${CONSUMER_FLAGS:-}"
CONSUMER=$SRC/tests/consumer
unset PKG_CONFIG_PATH CMAKE_PREFIX_PATH

# expect_consumer NAME BINARY [ENV...]: the consumer runs in a fresh
# directory and prints its line.
expect_consumer() {
  local name=$1 bin=$2
  shift 2
  local dir
  dir=$(mktemp -d "$TMP/run.XXXXXX")
  RC=0
  env "$@" "$bin" "$dir" >"$dir.out" 2>"$dir.err" || RC=$?
  if [[ $RC == 0 ]] && grep -qxF "wds $VERSION (headers $VERSION) samples 5 bytes 50" "$dir.out"; then
    ok "$name"
  else
    bad "$name" "exit $RC" "$(head -c 600 "$dir.out")" "$(head -c 600 "$dir.err")"
  fi
}
# needs NAME BINARY yes|no: whether BINARY needs libwds.so.MAJOR.
needs() {
  local got=no
  readelf -d "$2" | grep -qF "[libwds.so.$MAJOR]" && got=yes
  if [[ $got == "$3" ]]; then ok "$1"; else bad "$1" "needs libwds.so.$MAJOR: $got, wanted $3"; fi
}

# --version
for tool in "$WDS" "$TRAIN"; do
  name=version_$(basename "$tool")
  RC=0
  out=$("$tool" --version 2>&1) || RC=$?
  if [[ $RC == 0 && $out == "wds $VERSION" ]]; then ok "$name"; else bad "$name" "exit $RC: $out"; fi
done

# cmake --install
PREFIX=$TMP/prefix
if "$CMAKE" --install "$BUILD" --prefix "$PREFIX" >install.log 2>&1; then
  ok install
else
  bad install "$(tail -20 install.log)"
fi
LIBDIR=$(dirname "$(find "$PREFIX" -name wds.pc -path '*/pkgconfig/*' | head -1)")/..
LIBDIR=$(cd "$LIBDIR" 2>/dev/null && pwd || echo "$PREFIX/lib")
missing=()
for f in include/wds/wds.h include/wds/api.h include/wds/version.h include/wds/status.h \
  include/wds/reader.h include/wds/writer.h include/wds/loader.h bin/wds bin/wds-train; do
  [[ -e $PREFIX/$f ]] || missing+=("$f")
done
for f in libwds.a libwds.so "libwds.so.$MAJOR" "libwds.so.$VERSION" pkgconfig/wds.pc \
  cmake/wds/wdsConfig.cmake cmake/wds/wdsConfigVersion.cmake cmake/wds/wdsTargets.cmake; do
  [[ -e $LIBDIR/$f ]] || missing+=("${LIBDIR#"$PREFIX"/}/$f")
done
if ((${#missing[@]} == 0)); then ok install_files; else bad install_files "missing: ${missing[*]}"; fi
# Nothing else at the top: bin, include, lib (the Python extension, for
# one, is pip's: component python, not in a plain install).
top=$(cd "$PREFIX" && find . -mindepth 1 -maxdepth 1 | sed 's|^\./||' | sort | tr '\n' ' ')
lib_top=${LIBDIR#"$PREFIX"/}
lib_top=${lib_top%%/*}
if [[ $top == "bin include $lib_top " ]]; then ok install_nothing_else; else
  bad install_nothing_else "top of the prefix: $top"; fi
soname=$(readelf -d "$LIBDIR/libwds.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [[ $soname == "libwds.so.$MAJOR" ]]; then ok soname; else bad soname "SONAME '$soname'"; fi
RC=0
out=$("$PREFIX/bin/wds" --version 2>&1) || RC=$?
if [[ $RC == 0 && $out == "wds $VERSION" ]]; then ok installed_wds; else bad installed_wds "exit $RC: $out"; fi

# pkg-config, shared and static
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
if [[ $(pkg-config --modversion wds 2>&1) == "$VERSION" ]]; then ok pc_version; else
  bad pc_version "$(pkg-config --modversion wds 2>&1)"; fi
read -r -a PC_CFLAGS <<<"$(pkg-config --cflags wds)"
read -r -a PC_LIBS <<<"$(pkg-config --libs wds)"
if "$CC" "${FLAGS[@]}" "${PC_CFLAGS[@]}" "$CONSUMER/consumer.c" -o pc-shared "${PC_LIBS[@]}" \
  >pc-shared.log 2>&1; then
  ok pc_shared_build
  needs pc_shared_needs ./pc-shared yes
  expect_consumer pc_shared_run ./pc-shared "LD_LIBRARY_PATH=$LIBDIR"
else
  bad pc_shared_build "$(tail -20 pc-shared.log)"
fi
# The static archive by name; the rest of --static's list (-lwds aside).
read -r -a PC_STATIC <<<"$(pkg-config --static --libs wds | sed 's/\(^\| \)-lwds\( \|$\)/ /')"
if "$CC" "${FLAGS[@]}" "${PC_CFLAGS[@]}" "$CONSUMER/consumer.c" -o pc-static \
  -Wl,-Bstatic -lwds -Wl,-Bdynamic "${PC_STATIC[@]}" >pc-static.log 2>&1; then
  ok pc_static_build
  needs pc_static_needs ./pc-static no
  expect_consumer pc_static_run ./pc-static
else
  bad pc_static_build "$(tail -20 pc-static.log)"
fi
unset PKG_CONFIG_PATH

# find_package(wds): wds::wds and wds::wds_static
for target in wds wds_static; do
  b=$TMP/cmake-$target
  if "$CMAKE" -S "$CONSUMER" -B "$b" -DCMAKE_PREFIX_PATH="$PREFIX" -DCMAKE_C_COMPILER="$CC" \
    -DCMAKE_C_FLAGS="${CONSUMER_FLAGS:-}" -DCMAKE_EXE_LINKER_FLAGS="${CONSUMER_FLAGS:-}" \
    -DWDS_TARGET="wds::$target" >"$b.log" 2>&1 && "$CMAKE" --build "$b" >>"$b.log" 2>&1; then
    ok "find_package_${target}_build"
    if [[ $target == wds ]]; then needs find_package_wds_needs "$b/consumer" yes; else
      needs find_package_wds_static_needs "$b/consumer" no; fi
    expect_consumer "find_package_${target}_run" "$b/consumer"
  else
    bad "find_package_${target}_build" "$(tail -20 "$b.log")"
  fi
done
# A version the package does not satisfy is refused.
mkdir -p v99
cat >v99/CMakeLists.txt <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(v99 LANGUAGES C)
find_package(wds 99 REQUIRED)
CMAKE
if "$CMAKE" -S v99 -B v99/build -DCMAKE_PREFIX_PATH="$PREFIX" >v99.log 2>&1; then
  bad find_package_version "find_package(wds 99) succeeded"
elif grep -q "compatible" v99.log; then
  ok find_package_version
else
  bad find_package_version "$(tail -20 v99.log)"
fi

# cpack -G DEB, unpacked into a temporary root
if "$CPACK" -G DEB --config "$BUILD/CPackConfig.cmake" -B "$TMP/deb" >cpack.log 2>&1; then
  ok cpack_deb
else
  bad cpack_deb "$(tail -20 cpack.log)"
fi
deb=$(find "$TMP/deb" -maxdepth 1 -name '*.deb' | head -1)
if [[ -n $deb ]]; then
  depends=$(dpkg-deb -f "$deb" Depends)
  miss=()
  for p in libarchive13 libzstd1 zlib1g liblzma5 libturbojpeg0 libpng16-16 libc6; do
    [[ $depends == *"$p"* ]] || miss+=("$p")
  done
  if ((${#miss[@]} == 0)); then ok deb_depends; else bad deb_depends "Depends: $depends" "missing: ${miss[*]}"; fi
  ROOT=$TMP/root
  dpkg-deb -x "$deb" "$ROOT"
  top=$(cd "$ROOT/usr" && find . -mindepth 1 -maxdepth 1 | sed 's|^\./||' | sort | tr '\n' ' ')
  if [[ $top == "bin include $lib_top " ]]; then ok deb_nothing_else; else
    bad deb_nothing_else "top of /usr: $top"; fi
  RC=0
  out=$("$ROOT/usr/bin/wds" --version 2>&1) || RC=$?
  if [[ $RC == 0 && $out == "wds $VERSION" ]]; then ok deb_wds; else bad deb_wds "exit $RC: $out"; fi
  pc=$(find "$ROOT/usr" -name wds.pc | head -1)
  if [[ -n $pc ]]; then
    export PKG_CONFIG_PATH=${pc%/wds.pc}
    debdir=$(cd "${pc%/wds.pc}/.." && pwd)
    read -r -a PC_CFLAGS <<<"$(pkg-config --cflags wds)"
    read -r -a PC_LIBS <<<"$(pkg-config --libs wds)"
    if "$CC" "${FLAGS[@]}" "${PC_CFLAGS[@]}" "$CONSUMER/consumer.c" -o deb-shared "${PC_LIBS[@]}" \
      >deb-shared.log 2>&1; then
      ok deb_build
      needs deb_needs ./deb-shared yes
      expect_consumer deb_run ./deb-shared "LD_LIBRARY_PATH=$debdir"
    else
      bad deb_build "$(tail -20 deb-shared.log)"
    fi
    unset PKG_CONFIG_PATH
  else
    bad deb_build "no wds.pc in $(dpkg-deb -c "$deb" | head -30)"
  fi
else
  bad deb_depends "no .deb in $TMP/deb"
fi

echo "$passed passed, $failed failed"
((failed == 0))
