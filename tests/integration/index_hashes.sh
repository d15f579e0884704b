#!/usr/bin/env bash
# Tool test: `wds index --hashes` (issue 34 item 1): a SHA-256 per member,
# the one `wds ls --json` prints, checked by the loader before delivery and
# by `wds verify --index`.
#
# A plain tar shard (Python tarfile: no checksum of its data at all) and
# a zstd one (that tar through `zstd --no-check`: one frame, no content
# checksum, as another tool may write it) are indexed with --hashes; then
# one member's data byte is flipped (tar headers stay valid; the zstd
# shard is recompressed from the altered tar). Checks:
#   format   the index's "sha256" objects equal `wds ls --json`; an index
#            with hashes still reads where hashes are not used
#            (ls --summary --index) and the clean shard loads through it
#   stop     the loader errors naming shard, sample and member, and no
#            batch holds the altered sample
#   skip     every other sample is delivered valid, the altered one never
#            (its row is invalid), and the skip is counted; the same for
#            the zstd shard
#   defer    the same with --defer-reads on and large members (deferred
#            reads would skip the check: hashed shards are not deferred)
#   verify   `wds verify --index` reports hash_mismatch naming the member;
#            a clean shard passes; an index without hashes is a problem
#   old      an index without hashes loads and behaves as before (the
#            altered sample delivered: nothing to check it against)
#
# Usage: index_hashes.sh WDS_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup index_hashes "timeout zstd" "$@"

"$PYTHON3" - <<'EOF' || die "cannot make the shards"
import io, tarfile
def make(path, big):
    with tarfile.open(path, 'w', format=tarfile.USTAR_FORMAT) as t:
        for i in range(8):
            body = (b'sample %d ' % i) * (4000 if big else 40)
            for ext, data in (('txt', body), ('cls', str(i).encode())):
                ti = tarfile.TarInfo('s%03d.%s' % (i, ext))
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
make('d.tar', False)
make('big.tar', True)
EOF
zstd -q --no-check -c d.tar >z.tar.zst || die "zstd failed"

# flip FILE OFFSET: one data byte of sample s003's txt member.
flip() {
  "$PYTHON3" -c '
import sys
p, off = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read()); b[off] ^= 0x20; open(p, "wb").write(b)' "$1" "$2"
}
# txt data offset of s003 in the tar stream, from the index (OFFSET + 512).
data_off() {
  "$PYTHON3" -c '
import json, sys
ix = json.load(open(sys.argv[1]))
s = [s for s in ix["shardlist"][0]["samples"] if s["key"] == "s003"][0]
print(s["fields"]["txt"][0] + 512 + 7)' "$1"
}

for name in d big; do
  w ix-$name index --hashes -o ix-$name.json $name.tar
  expect_rc index_hashes_$name 0 ix-$name
done

# ---- format ----
w ls ls --json d.tar
"$PYTHON3" - <<'EOF' >cmp.txt 2>&1 && ok format_equals_ls_json || bad format_equals_ls_json "$(cat cmp.txt)"
import json
ix = json.load(open('ix-d.json'))
ls = [json.loads(l) for l in open('ls.out')]
samples = ix["shardlist"][0]["samples"]
assert len(samples) == len(ls) == 8, (len(samples), len(ls))
for s, l in zip(samples, ls):
    assert s["key"] == l["__key__"]
    assert s["sha256"] == {e: f["sha256"] for e, f in l["fields"].items()}, s
EOF
w sum ls --summary --index ix-d.json d.tar
expect_rc format_read_by_ls_summary 0 sum
w clean batches d.tar --decode txt,cls --mode exact --index ix-d.json --batch-size 4 --json
expect_rc format_clean_loads 0 clean
check format_clean_all_valid test "$(grep -c '"valid":\[1,1,1,1\]' clean.out)" = 2

# ---- the altered shard (plain tar), under both policies ----
cp d.tar bad.tar
flip bad.tar "$(data_off ix-d.json)"
sed 's/"d\.tar"/"bad.tar"/' ix-d.json >ix-bad.json
sed 's/"d\.tar"/"bad.tar"/' ix-big.json >/dev/null
w tar_ls ls --json bad.tar
expect_rc tar_headers_still_valid 0 tar_ls

w stop batches bad.tar --decode txt,cls --mode exact --index ix-bad.json --batch-size 1 --on-error stop --json
check stop_fails test "$RC" != 0
has stop_names_shard_sample_member stop.err 'bad.tar: sample "s003" (3 of the shard): member "txt": its data does not match'
check stop_never_delivers_it bash -c '! grep -q "\"s003\"" stop.out'

w skip batches bad.tar --decode txt,cls --mode exact --index ix-bad.json --batch-size 1 --on-error skip --json
expect_rc skip_runs 0 skip
check skip_delivers_the_other_seven test "$(grep -c '"valid":\[1\]' skip.out)" = 7
check skip_never_delivers_it bash -c '! grep -q "\"s003\"" skip.out'
check skip_its_row_invalid test "$(grep -c '"valid":\[0\]' skip.out)" = 1
has skip_counted skip.err 'skipped 1 error'
has skip_names_it skip.err 'sample "s003" (3 of the shard): member "txt"'

# ---- zstd: a shard whose one frame is checked only at its end ----
w zix index --hashes -o ix-z.json z.tar.zst
expect_rc zstd_index 0 zix
# Alter the sample in the tar, recompress without a checksum (a shard
# written by another tool): only the index's hashes can tell. (Its
# compressed size may differ: the index's filesize is dropped.)
zstd -q --no-check -c bad.tar >zbad.tar.zst
sed 's/"z\.tar\.zst"/"zbad.tar.zst"/; s/"filesize": [0-9]*/"filesize": null/' ix-z.json >ix-zbad.json
w zskip batches zbad.tar.zst --decode txt,cls --mode exact --index ix-zbad.json --batch-size 1 --on-error skip --json
expect_rc zstd_skip_runs 0 zskip
check zstd_skip_never_delivers_it bash -c '! grep -q "\"s003\"" zskip.out'
check zstd_skip_delivers_the_other_seven test "$(grep -c '"valid":\[1\]' zskip.out)" = 7

# ---- deferred reads: large members of a local plain tar ----
cp big.tar bigbad.tar
flip bigbad.tar "$(data_off ix-big.json)"
sed 's/"big\.tar"/"bigbad.tar"/' ix-big.json >ix-bigbad.json
w defer batches bigbad.tar --decode txt,cls --mode exact --index ix-bigbad.json --batch-size 1 --on-error skip --defer-reads on --shuffle-buffer 4 --json
expect_rc defer_runs 0 defer
check defer_never_delivers_it bash -c '! grep -q "\"s003\"" defer.out'
check defer_delivers_the_other_seven test "$(grep -c '"valid":\[1\]' defer.out)" = 7

# ---- wds verify --index ----
w vbad verify --index ix-bad.json bad.tar
expect_rc verify_mismatch_exit_1 1 vbad
has verify_names_member vbad.out 'bad.tar: sample s003: hash_mismatch: member "txt"'
w vclean verify --index ix-d.json d.tar
expect_rc verify_clean 0 vclean
w vjson verify --json --index ix-bad.json bad.tar
has verify_json_kind vjson.out '"kind": "hash_mismatch"'
w ixold index -o ix-old.json bad.tar
w vold verify --index ix-old.json bad.tar
expect_rc verify_index_without_hashes 1 vold
has verify_index_without_hashes_says vold.out 'records no hashes'
w vmissing verify --index missing.json d.tar
expect_rc verify_missing_index 1 vmissing
has verify_missing_index_named vmissing.err 'missing.json: cannot open the index'

# ---- an old index (no hashes) behaves as before ----
check old_index_has_no_hashes bash -c '! grep -q sha256 ix-old.json'
w old batches bad.tar --decode txt,cls --mode exact --index ix-old.json --batch-size 1 --on-error stop --json
expect_rc old_index_loads 0 old
check old_index_delivers_all test "$(grep -c '"valid":\[1\]' old.out)" = 8

echo "$passed passed, $failed failed"
((failed == 0))
