#!/usr/bin/env bash
# Tool test: libraries that few runs need are loaded only by the runs that
# use them (shards/curl_dl.c, archive_dl.c, xml_dl.c; docs/performance.md,
# "Start-up"), and not linked.
#   * `wds ls` of a local shard does not load libcurl (the dynamic loader's
#     LD_DEBUG=files log names no libcurl); a local plain .tar run (ls, cat,
#     bench, write) loads no libarchive, libxml2 or libcrypto;
#   * the wds binary names none of them as a needed library;
#   * a .tar.bz2 loads libarchive and reads the same samples (and `wds
#     cat` bytes) as the plain .tar; legacy-format .tar.lz4 shards, one
#     shorter than a tar block once compressed, list as their plain tars
#     (skipped, saying so, without the lz4 command); a libarchive older
#     than 3.2.0 (FAKELIB_DIR's stand-in on LD_LIBRARY_PATH) is refused
#     naming the shard, the compression and both versions, and plain
#     shards still read;
#   * `wds write` (.tar, .tar.gz, .tar.zst) loads no libarchive and its
#     shards read back;
#   * `wds ls` of an http:// URL on a refused port loads libcurl on use and
#     fails with a message naming the URL;
#   * an s3:// listing (tests/integration/s3_fake.py) loads libxml2 on use;
#     a library without libxml2's functions is refused naming libxml2.
# Skips (77) when wds was built without libcurl (after the local checks).
#
# Usage: startup.sh WDS_BINARY FAKELIB_DIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup startup "readelf bzip2" "$1"
FAKELIB=${2:?usage: startup.sh WDS_BINARY FAKELIB_DIR}
[[ $FAKELIB == /* ]] || FAKELIB=$OLDPWD/$FAKELIB

unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
printf 'x' >0.txt
"$GTAR" --format=ustar -cf s.tar 0.txt

RC=0
LD_DEBUG=files "$WDS" ls s.tar >local.out 2>local.err || RC=$?
if [[ $RC == 0 ]] && grep -q '^0' local.out && ! grep -q libcurl local.err; then
  ok local_run_loads_no_libcurl
else
  bad local_run_loads_no_libcurl "exit $RC" "$(grep libcurl local.err | head -2)" "$(head -2 local.out)"
fi

if readelf -d "$WDS" | grep NEEDED | grep -q libcurl; then
  bad not_linked "$(readelf -d "$WDS" | grep libcurl)"
else
  ok not_linked
fi
if readelf -d "$WDS" | grep NEEDED | grep -Eq 'libarchive|libxml2|libcrypto|libssl'; then
  bad not_linked_archive_xml2_crypto "$(readelf -d "$WDS" | grep -E 'libarchive|libxml2|libcrypto|libssl')"
else
  ok not_linked_archive_xml2_crypto
fi

# loaded LOG: the libraries the dynamic loader loaded, by name
loaded() { grep -o 'file=[^ ]*' "$1" | sed 's/^file=//' | sort -u | tr '\n' ' '; }
# A few samples of several fields, as plain, bzip2 and lz4 shards.
mkdir -p tree
for i in 0 1 2 3 4; do
  head -c $((1000 + i * 700)) /dev/urandom >"tree/s$i.bin"
  printf '%d' "$i" >"tree/s$i.cls"
done
"$WDS" write -o 'p-%d.tar' tree >/dev/null 2>&1 || die "wds write of tree failed"
bzip2 -c p-0.tar >p-0.tar.bz2
# lsj SHARD: `wds ls --json` (each field's size and SHA-256) without the URL
lsj() { "$WDS" ls --json "$1" | sed 's/"__url__": "[^"]*", //'; }
lsj p-0.tar >plain.ls 2>plain.lserr || die "wds ls p-0.tar: $(head -2 plain.lserr)"
grep -q '"sha256": "[0-9a-f]\{64\}"' plain.ls || die "wds ls --json printed no SHA-256: $(head -2 plain.ls)"
"$WDS" cat p-0.tar >plain.cat 2>/dev/null || die "wds cat p-0.tar failed"

# Every local plain-tar command: none loads libarchive, libxml2 or libcrypto.
lazy_bad=()
for cmd in "ls --json p-0.tar" "cat p-0.tar" "bench p-0.tar --decode bin --batch-size 2 --workers 1 --epochs 1" \
  "write -o w-%d.tar tree"; do
  RC=0
  # shellcheck disable=SC2086 # the command's words
  LD_DEBUG=files "$WDS" $cmd >cmd.out 2>cmd.err || RC=$?
  libs=$(loaded cmd.err)
  if [[ $RC != 0 ]]; then
    lazy_bad+=("wds $cmd: exit $RC: $(grep -v '^ *[0-9]*:' cmd.err | head -2)")
  elif [[ $libs == *libarchive* || $libs == *libxml2* || $libs == *libcrypto* ]]; then
    lazy_bad+=("wds $cmd loaded: $libs")
  fi
done
if ((${#lazy_bad[@]} == 0)); then ok local_plain_runs_load_no_libarchive_libxml2_libcrypto; else
  bad local_plain_runs_load_no_libarchive_libxml2_libcrypto "${lazy_bad[@]}"; fi

# .tar.bz2: libarchive is loaded, and the samples are the plain shard's.
RC=0
LD_DEBUG=files "$WDS" ls p-0.tar.bz2 >/dev/null 2>bz2.err || RC=$?
lsj p-0.tar.bz2 >bz2.ls 2>/dev/null || RC=$?
grep -v '^ *[0-9]*:' bz2.err >bz2.msg || true
if [[ $RC == 0 ]] && [[ $(loaded bz2.err) == *libarchive.so* ]] && cmp -s plain.ls bz2.ls; then
  ok bz2_loads_libarchive_and_reads
else
  bad bz2_loads_libarchive_and_reads "exit $RC" "loaded: $(loaded bz2.err)" "$(head -3 bz2.msg)" "$(diff plain.ls bz2.ls | head -4)"
fi
RC=0
"$WDS" cat p-0.tar.bz2 >bz2.cat 2>bz2cat.err || RC=$?
if [[ $RC == 0 ]] && cmp -s plain.cat bz2.cat; then ok bz2_cat_identical; else
  bad bz2_cat_identical "exit $RC" "$(head -3 bz2cat.err)"; fi
# lz4, legacy format: shorter than one tar block once compressed (it was
# taken for a cut tar), and longer.
if command -v lz4 >/dev/null 2>&1; then
  lz4_bad=()
  "$GTAR" --format=ustar -cf small.tar 0.txt
  for t in small.tar p-0.tar; do
    lz4 -q -l -c "$t" >"$t.lz4"
    RC=0
    "$WDS" ls "$t.lz4" >lz4.ls 2>lz4.err || RC=$?
    "$WDS" ls "$t" >lz4.want 2>/dev/null
    if [[ $RC != 0 ]] || ! cmp -s lz4.want lz4.ls; then lz4_bad+=("$t.lz4: exit $RC: $(head -2 lz4.err)"); fi
  done
  if ((${#lz4_bad[@]} == 0)); then ok lz4_legacy_reads; else bad lz4_legacy_reads "${lz4_bad[@]}"; fi
else
  echo "# skipped lz4_legacy_reads: no lz4 command (apt-get install lz4)"
fi

# A libarchive too old: refused when loaded, naming what needed it.
[[ -f $FAKELIB/libwds_fake_old_archive.so ]] || die "no $FAKELIB/libwds_fake_old_archive.so"
mkdir -p old
cp "$FAKELIB/libwds_fake_old_archive.so" old/libarchive.so.13
RC=0
LD_LIBRARY_PATH=$TMP/old "$WDS" ls p-0.tar.bz2 >old.out 2>old.err || RC=$?
want="wds ls: p-0.tar.bz2: bzip2 data needs libarchive: cannot use libarchive 3.1.2: libarchive 3.2.0 or later is needed"
if [[ $RC == 1 ]] && grep -qF "$want" old.err && [[ ! -s old.out ]]; then ok old_libarchive_refused; else
  bad old_libarchive_refused "exit $RC, wanted 1 and '$want...'" "$(head -3 old.err)"; fi
RC=0
LD_LIBRARY_PATH=$TMP/old lsj p-0.tar >old-plain.ls 2>old-plain.err || RC=$?
if [[ $RC == 0 ]] && cmp -s plain.ls old-plain.ls; then ok plain_reads_without_libarchive; else
  bad plain_reads_without_libarchive "exit $RC" "$(head -3 old-plain.err)"; fi

# wds write: .tar, .tar.gz, .tar.zst (zlib and libzstd, no libarchive), from
# a directory and from a .tar.bz2 on stdin; the shards read back.
write_bad=()
for ext in tar tar.gz tar.zst; do
  rm -rf "out-$ext" && mkdir "out-$ext"
  RC=0
  LD_DEBUG=files "$WDS" write -o "out-$ext/w-%d.$ext" tree >/dev/null 2>write.err || RC=$?
  libs=$(loaded write.err)
  [[ $RC == 0 ]] || write_bad+=("write .$ext: exit $RC: $(grep -v '^ *[0-9]*:' write.err | head -2)")
  [[ $libs != *libarchive* ]] || write_bad+=("write .$ext loaded libarchive")
  lsj "out-$ext/w-0.$ext" >w.ls 2>w.err || write_bad+=("ls .$ext: $(head -2 w.err)")
  cmp -s plain.ls w.ls || write_bad+=(".$ext reads back differently: $(diff plain.ls w.ls | head -3)")
done
RC=0
"$WDS" cat p-0.tar.bz2 2>/dev/null | "$WDS" write -o 'from-bz2-%d.tar' - >/dev/null 2>fw.err || RC=$?
[[ $RC == 0 ]] || write_bad+=("cat .tar.bz2 | write: exit $RC: $(head -2 fw.err)")
"$WDS" cat from-bz2-0.tar >fw.cat 2>/dev/null
cmp -s plain.cat fw.cat || write_bad+=("cat .tar.bz2 | write: the shard differs")
if ((${#write_bad[@]} == 0)); then ok write_needs_no_libarchive; else bad write_needs_no_libarchive "${write_bad[@]}"; fi

# A port nothing listens on: bind one, close it.
port=$("$PYTHON3" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port/s.tar"
RC=0
LD_DEBUG=files timeout 60 "$WDS" ls --retries 0 "$url" >http.out 2>http.err || RC=$?
if grep -q "built without libcurl" http.err; then
  echo "SKIP: wds was built without libcurl"
  exit 77
fi
if [[ $RC == 1 ]] && grep -q "libcurl.so" http.err && grep -q "wds ls: .*$url" http.err; then
  ok http_run_loads_libcurl_on_use
else
  bad http_run_loads_libcurl_on_use "exit $RC" "$(grep -v '^ *[0-9]*:' http.err | head -3)"
fi

# s3:// listings: libxml2 on use (an empty listing page: "no object matches").
probe=$(AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s "$WDS" expand 's3://b/*.tar' 2>&1 || true)
if [[ $probe == *"built without libxml2"* ]]; then
  echo "# skipped the s3:// listing checks: wds was built without libxml2"
else
  "$PYTHON3" "$HERE/s3_fake.py" fake.port &
  fake_pid=$!
  trap 'kill $fake_pid 2>/dev/null || true; wait $fake_pid 2>/dev/null || true; wds_test_cleanup' EXIT
  for ((i = 0; i < 100; i++)); do
    [[ -s fake.port ]] && break
    sleep 0.05
  done
  [[ -s fake.port ]] || die "s3_fake.py did not start"
  AWS_ENDPOINT_URL=http://127.0.0.1:$(cat fake.port)
  export AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID=k AWS_SECRET_ACCESS_KEY=s
  unset AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3 AWS_PROFILE
  RC=0
  LD_DEBUG=files timeout 60 "$WDS" expand 's3://page/a/*.tar' >s3.out 2>s3.err || RC=$?
  want='wds expand: no object matches s3://page/a/*.tar (0 listed'
  if [[ $RC == 1 ]] && [[ $(loaded s3.err) == *libxml2.so* ]] && grep -qF "$want" s3.err; then
    ok s3_listing_loads_libxml2_on_use
  else
    bad s3_listing_loads_libxml2_on_use "exit $RC, wanted 1 and '$want'" "loaded: $(loaded s3.err)" \
      "$(grep -v '^ *[0-9]*:' s3.err | head -3)"
  fi
  mkdir -p noxml
  cp "$FAKELIB/libwds_fake_empty.so" noxml/libxml2.so.2
  cp "$FAKELIB/libwds_fake_empty.so" noxml/libxml2.so.16
  RC=0
  LD_LIBRARY_PATH=$TMP/noxml timeout 60 "$WDS" expand 's3://page/a/*.tar' >noxml.out 2>noxml.err || RC=$?
  want='wds expand: s3://page/a/*.tar (ListObjectsV2): s3:// listings need libxml2: cannot load libxml2: it has no xmlInitParser'
  if [[ $RC == 1 ]] && grep -qF "$want" noxml.err; then ok s3_listing_without_libxml2_says_so; else
    bad s3_listing_without_libxml2_says_so "exit $RC, wanted 1 and '$want'" "$(head -3 noxml.err)"; fi
fi

echo "$passed passed, $failed failed"
((failed == 0))
