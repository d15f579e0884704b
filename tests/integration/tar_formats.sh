#!/usr/bin/env bash
# Integration test: tar dialects and compressions.
#
# Builds a fixture tree at test time (fixtures.py: long, non-ASCII and dotted
# names, multi-dot and upper-case extensions, names without an extension,
# zero-byte and > 1 MiB members, links, directories, "__*__" metadata) and
# archives it, in a fixed member order, with GNU tar (gnu, posix, ustar) and
# bsdtar (default, pax, gnutar, ustar); each archive is also compressed with
# gzip, zstd, xz and bzip2.  Checks that
#   * `wds ls --json` of each plain tar equals the listing computed
#     independently by expect_from_tree.py (Python tarfile + WebDataset 1.0.2
#     rules), __url__ included;
#   * every compressed variant (also renamed, multi-frame, read through pipe:
#     and stdin) lists the same samples as the plain tar;
#   * all dialects of the same tree list the same samples;
#   * samples never merge across shards.
#
# Usage: tar_formats.sh WDS_BINARY [SHARED_TESTDATA]   (the second is unused)
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
# Set WDS_TEST_KEEP=1 to keep the temporary directory.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup tar-formats "bsdtar zstd gzip xz bzip2 timeout cmp" "$@"
mkdir out
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() {
  echo "FAIL $1"
  shift
  local line
  for line in "$@"; do printf '    %s\n' "$line"; done
  failed=$((failed + 1))
}

# run_ls NAME SPEC...: `wds ls --json SPEC...` into out/NAME.{jsonl,err}; status in RC.
RC=0
run_ls() {
  local name=$1
  shift
  RC=0
  timeout 60 "$WDS" ls --json "$@" >"out/$name.jsonl" 2>"out/$name.err" || RC=$?
}

# expect_listing NAME EXPECTED SPEC [compare options...]: wds lists SPEC alone,
# exits 0 and prints EXPECTED (a reference listing) with __url__ == SPEC.
expect_listing() {
  local name=$1 expected=$2 spec=$3 msg
  shift 3
  run_ls "$name" "$spec"
  if ((RC != 0)); then
    bad "$name" "exit status $RC, want 0" "stderr: $(head -c 800 "out/$name.err")"
    return
  fi
  if msg=$("$PYTHON3" "$HERE/compare_listings.py" --expected "$expected" \
    --actual "out/$name.jsonl" --url "$spec" "$@" 2>&1); then
    ok "$name"
  else
    bad "$name" "$msg"
  fi
}

# same_samples NAME REFERENCE_OUTPUT OTHER_OUTPUT: equal modulo __url__.
same_samples() {
  local msg
  if msg=$("$PYTHON3" "$HERE/compare_listings.py" --expected "$2" --actual "$3" \
    --ignore-url --nonempty 2>&1); then
    ok "$1"
  else
    bad "$1" "$msg"
  fi
}

# ---------------------------------------------------------------- fixtures
"$PYTHON3" "$HERE/fixtures.py" tree "$TMP"
GNU_OPTS=(--no-recursion --mtime=@1700000000 --owner=0 --group=0 --numeric-owner -C tree)
BSD_OPTS=(-n --uid 0 --gid 0 --uname root --gname root -C tree)
"$GTAR" -cf gnu.tar --format=gnu "${GNU_OPTS[@]}" -T list-full
"$GTAR" -cf posix.tar --format=posix --pax-option=delete=atime,delete=ctime \
  "${GNU_OPTS[@]}" -T list-full
"$GTAR" -cf ustar.tar --format=ustar "${GNU_OPTS[@]}" -T list-ustar
bsdtar -cf bsd.tar "${BSD_OPTS[@]}" -T list-full
# (bsdtar's pax headers also record atime and ctime, which cannot be fixed;
# they do not affect the samples.)
bsdtar -cf bsd-pax.tar --format pax "${BSD_OPTS[@]}" -T list-full
bsdtar -cf bsd-gnutar.tar --format gnutar "${BSD_OPTS[@]}" -T list-full
bsdtar -cf bsd-ustar.tar --format ustar "${BSD_OPTS[@]}" -T list-ustar
FULL_FORMATS=(gnu posix bsd bsd-pax bsd-gnutar)
USTAR_FORMATS=(ustar bsd-ustar)

# The full tree really needs the extensions: GNU tar refuses it as ustar.
if "$GTAR" -cf ustar-full.tar --format=ustar "${GNU_OPTS[@]}" -T list-full 2>out/ustar-full.err; then
  bad fixture_ustar_refuses_long_names "GNU tar wrote the full tree as ustar; the long names are not long enough"
else
  ok fixture_ustar_refuses_long_names
fi
# ... and the archives use them (GNU long-name records, pax extended headers).
for f in gnu bsd-gnutar; do
  if grep -aq '././@LongLink' "$f.tar"; then ok "fixture_${f}_has_longlink"; else
    bad "fixture_${f}_has_longlink" "no ././@LongLink record in $f.tar"
  fi
done
for f in posix bsd bsd-pax; do
  if grep -aq 'PaxHeader' "$f.tar"; then ok "fixture_${f}_has_pax_headers"; else
    bad "fixture_${f}_has_pax_headers" "no pax extended header in $f.tar"
  fi
done

# Independent expectations, from the plain tars.
for f in "${FULL_FORMATS[@]}" "${USTAR_FORMATS[@]}"; do
  "$PYTHON3" "$HERE/expect_from_tree.py" "$f.tar" >"$f.expected" ||
    die "expect_from_tree.py failed on $f.tar"
done
for f in "${FULL_FORMATS[@]}"; do
  cmp -s gnu.expected "$f.expected" || die "Python tarfile reads $f.tar differently from gnu.tar"
done
cmp -s ustar.expected bsd-ustar.expected || die "Python tarfile reads bsd-ustar.tar differently from ustar.tar"
n=$(wc -l <gnu.expected)
((n == 19)) || die "gnu.expected has $n samples, the fixture tree makes 19"
n=$(wc -l <ustar.expected)
((n == 16)) || die "ustar.expected has $n samples, the ustar subset makes 16"

# Compressed variants.
COMPRESSIONS=(gz zst xz bz2)
compress() { # FORMAT
  gzip -n -c "$1.tar" >"$1.tar.gz"
  zstd -q -c "$1.tar" >"$1.tar.zst"
  xz -1 -T1 -c "$1.tar" >"$1.tar.xz"
  bzip2 -c "$1.tar" >"$1.tar.bz2"
}
pids=()
for f in "${FULL_FORMATS[@]}" "${USTAR_FORMATS[@]}"; do
  compress "$f" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || die "compressing the fixtures failed"; done
# Detection is by content, not by name.
cp gnu.tar.zst gnu-zst-named.tar
cp gnu.tar.gz gnu-gz-named.tar
cp gnu.tar.xz gnu-xz-named.tar.bz2
cp gnu.tar gnu-plain-named.tar.gz
# Multi-frame zstd and multi-member gzip streams (split inside big.bin's data).
head -c 1000000 gnu.tar >part1
tail -c +1000001 gnu.tar >part2
{ zstd -q -c part1; zstd -q -c part2; } >gnu-2frames.tar.zst
{ gzip -n -c part1; gzip -n -c part2; } >gnu-2members.tar.gz

# ------------------------------------------------------------------ checks
for f in "${FULL_FORMATS[@]}" "${USTAR_FORMATS[@]}"; do
  # Plain tar against the independent expectation (absolute path as spec).
  expect_listing "${f}_plain" "$f.expected" "$TMP/$f.tar"
  for c in "${COMPRESSIONS[@]}"; do
    run_ls "${f}_$c" "$TMP/$f.tar.$c"
    if ((RC != 0)); then
      bad "${f}_$c" "exit status $RC, want 0" "stderr: $(head -c 800 "out/${f}_$c.err")"
      continue
    fi
    # Same samples as the plain tar (whose listing is $f.expected), own __url__.
    if msg=$("$PYTHON3" "$HERE/compare_listings.py" --expected "$f.expected" \
      --actual "out/${f}_$c.jsonl" --url "$TMP/$f.tar.$c" 2>&1); then
      ok "${f}_$c"
    else
      bad "${f}_$c" "$msg"
    fi
  done
done

# All dialects of the same tree give the same samples.
for f in posix bsd bsd-pax bsd-gnutar; do
  same_samples "samples_${f}_same_as_gnu" out/gnu_plain.jsonl "out/${f}_plain.jsonl"
done
same_samples samples_bsd-ustar_same_as_ustar out/ustar_plain.jsonl out/bsd-ustar_plain.jsonl

# Renamed, multi-frame, relative path, file://.
for v in gnu-zst-named.tar gnu-gz-named.tar gnu-xz-named.tar.bz2 gnu-plain-named.tar.gz \
  gnu-2frames.tar.zst gnu-2members.tar.gz; do
  expect_listing "detect_${v}" gnu.expected "$TMP/$v"
done
expect_listing relative_path gnu.expected gnu.tar.xz
expect_listing file_url gnu.expected "file://$TMP/gnu.tar.bz2"

# Non-seekable sources: pipe: and stdin, each compression.
for c in plain "${COMPRESSIONS[@]}"; do
  file=gnu.tar.$c
  [[ $c == plain ]] && file=gnu.tar
  expect_listing "pipe_$c" gnu.expected "pipe:cat '$TMP/$file'"
  name=stdin_$c
  RC=0
  # Through a pipe (not seekable); only wds's status counts.
  timeout 60 "$WDS" ls --json - < <(cat "$file") >"out/$name.jsonl" 2>"out/$name.err" || RC=$?
  if ((RC != 0)); then
    bad "$name" "exit status $RC, want 0" "stderr: $(head -c 800 "out/$name.err")"
  elif msg=$("$PYTHON3" "$HERE/compare_listings.py" --expected gnu.expected \
    --actual "out/$name.jsonl" --url - 2>&1); then
    ok "$name"
  else
    bad "$name" "$msg"
  fi
done

# Several specs in one run: shards in order, each sample with its own __url__.
{
  "$PYTHON3" "$HERE/expect_from_tree.py" gnu.tar --url "$TMP/gnu.tar"
  "$PYTHON3" "$HERE/expect_from_tree.py" ustar.tar --url "$TMP/ustar.tar.zst"
  "$PYTHON3" "$HERE/expect_from_tree.py" bsd.tar --url "pipe:cat bsd.tar.xz"
} >multi.expected
run_ls multi_spec "$TMP/gnu.tar" "$TMP/ustar.tar.zst" "pipe:cat bsd.tar.xz"
if ((RC != 0)); then
  bad multi_spec "exit status $RC, want 0" "stderr: $(head -c 800 out/multi_spec.err)"
elif msg=$("$PYTHON3" "$HERE/compare_listings.py" --expected multi.expected \
  --actual out/multi_spec.jsonl 2>&1); then
  ok multi_spec
else
  bad multi_spec "$msg"
fi

# Samples do not span shards: x.jpg ends shard 1, x.txt starts shard 2.
mkdir pair
"$PYTHON3" "$HERE/fixtures.py" payload pair/x.jpg 700 pair-jpg
"$PYTHON3" "$HERE/fixtures.py" payload pair/x.txt 9 pair-txt
"$GTAR" -cf pair1.tar --format=gnu --mtime=@1700000000 --owner=0 --group=0 --numeric-owner -C pair x.jpg
"$GTAR" -cf pair2.tar --format=gnu --mtime=@1700000000 --owner=0 --group=0 --numeric-owner -C pair x.txt
{
  "$PYTHON3" "$HERE/expect_from_tree.py" pair1.tar --url "$TMP/pair1.tar"
  "$PYTHON3" "$HERE/expect_from_tree.py" pair2.tar --url "$TMP/pair2.tar"
} >pair.expected
((($(wc -l <pair.expected)) == 2)) || die "pair.expected should hold 2 samples"
run_ls shard_boundary "$TMP/pair1.tar" "$TMP/pair2.tar"
if ((RC != 0)); then
  bad shard_boundary "exit status $RC, want 0" "stderr: $(head -c 800 out/shard_boundary.err)"
elif msg=$("$PYTHON3" "$HERE/compare_listings.py" --expected pair.expected \
  --actual out/shard_boundary.jsonl 2>&1); then
  ok shard_boundary
else
  bad shard_boundary "$msg"
fi

echo "$passed passed, $failed failed"
((failed == 0))
