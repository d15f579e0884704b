#!/usr/bin/env bash
# Tool test: inputs whose numbers and names wds must not trust
# or silently drop, through the `wds` command.
#   index   `wds batches --mode exact --index` with a doctored index: a
#           count of 0 for a shard of 480 samples (exit 1 under stop,
#           naming the shard, the index and both counts); 2^64-1 and 10^15
#           (refused at open under stop and skip alike, never a wrapped
#           total or filler batches without end); counts the index's own
#           tar_bytes or sample list contradict; a count a little too
#           large or too small names the true count and the index's, also
#           for a rank whose piece starts past the shard's real end; a
#           zstd shard of many small samples keeps its true, large count.
#   zstd    a shard written by `zstd --long=31` (2 GiB window) from a pipe:
#           every reading tool (ls, verify, index, cat, bench, batches,
#           write) refuses it naming the window, the limit and
#           --max-window, and reads it with --max-window 2G; a
#           `--long=27` one is read by default, refused under a lower
#           limit; a bad --max-window is a usage error.
#   names   a pax path with a NUL byte (as Python's tarfile writes it):
#           ls and verify report the member and its offset instead of
#           dropping it.
#
# Usage: index_bounds.sh WDS_BINARY
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
# Set WDS_TEST_KEEP=1 to keep the temporary directory.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup index_bounds "timeout zstd" "$@"

lines() {
  local n
  n=$(wc -l <"$2")
  if [[ $n == "$3" ]]; then ok "$1"; else bad "$1" "$n lines in $2, wanted $3"; fi
}

# ---------------------------------------------------------------- index
"$WDS" synth --shards 2 --samples 480 --size 16 's-%d.tar' >/dev/null || die "wds synth failed"
"$WDS" index 's-{0..1}.tar' -o ix.json >/dev/null || die "wds index failed"
# doctor NAME SHARD0_COUNT [KEEP]: ix.json with shard 0's nsamples replaced;
# its tar_bytes and sample list dropped unless KEEP says "tar" or "list".
doctor() {
  "$PYTHON3" - "$@" <<'EOF' || die "cannot write $1"
import json, sys
name, count = sys.argv[1], int(sys.argv[2])
keep = sys.argv[3] if len(sys.argv) > 3 else ""
d = json.load(open("ix.json"))
s = d["shardlist"][0]
s["nsamples"] = count
if keep != "tar":
    s.pop("tar_bytes")
if keep != "list":
    s.pop("samples")
json.dump(d, open(name, "w"))
EOF
}
B=(batches 's-{0..1}.tar' --mode exact --decode bin --batch-size 100)

w good "${B[@]}" --index ix.json
expect_rc index_good 0 good
lines index_good_batches good.out 10

doctor zero.json 0
w zero "${B[@]}" --index zero.json
expect_rc zero_count_stops 1 zero
has zero_count_message zero.err "index zero.json: s-0.tar: the index gives 0 samples, but the shard has 480"
lines zero_count_no_batches zero.out 0

doctor max.json 18446744073709551615
doctor e15.json 1000000000000000
for policy in stop skip; do
  for ix in max e15; do
    w "$ix-$policy" "${B[@]}" --index $ix.json --on-error $policy
    expect_rc "${ix}_${policy}_refused" 1 "$ix-$policy"
    has "${ix}_${policy}_names_shard" "$ix-$policy.err" "index $ix.json: s-0.tar: the index gives"
    has "${ix}_${policy}_plain_bound" "$ix-$policy.err" "more than the shard's 1484800 bytes can hold (at most 2899 in a plain tar"
  done
done
doctor tar.json 3000 tar
w tar "${B[@]}" --index tar.json
expect_rc tar_bytes_refused 1 tar
has tar_bytes_message tar.err '"nsamples" 3000 is more than its "tar_bytes" 1475072 can hold (at most 2880'
doctor list.json 481 list
w list "${B[@]}" --index list.json
expect_rc list_refused 1 list
has list_message list.err 'shardlist[0] ("s-0.tar") lists 480 samples but "nsamples" is 481'

doctor high.json 500

# wds ls --summary --index adds the entries' tar_bytes: a sum past 2^63 is
# an error, not a wrapped (undefined) signed sum.
"$PYTHON3" - <<'EOF' || die "cannot write big.json"
import json
d = json.load(open("ix.json"))
for s in d["shardlist"]:
    s["tar_bytes"] = 6000000000000000000
json.dump(d, open("big.json", "w"))
EOF
w big ls --summary --index big.json 's-{0..1}.tar'
expect_rc summary_sum_overflow 1 big
has summary_sum_overflow_message big.err "big.json: s-1.tar: the shards' tar_bytes add up to more than 2^63 bytes"
w high "${B[@]}" --index high.json
expect_rc high_stops 1 high
has high_message high.err "s-0.tar: ended after 480 samples, but the index high.json promised 500"
# Rank 1 of 2: its piece of shard 0 starts past sample 480.
doctor far.json 1200
w far "${B[@]}" --index far.json --world 2 --rank 1
expect_rc far_stops 1 far
has far_message far.err "s-0.tar: ended after 480 samples, but the index far.json promised 1200"
w far_skip "${B[@]}" --index far.json --world 2 --rank 1 --on-error skip
expect_rc far_skip_ends 0 far_skip
lines far_skip_batches far_skip.out 9
doctor low.json 400
w low "${B[@]}" --index low.json
expect_rc low_stops 1 low
has low_message low.err 's-0.tar: has more samples than the 400 the index low.json gives (480); sample "sample000000400" and later are not read'

"$WDS" synth --shards 1 --samples 3000 --size 1 'tiny-%d.tar' >/dev/null || die "wds synth failed"
zstd -q -19 tiny-0.tar -o tiny.tar.zst || die "zstd failed"
"$WDS" index tiny.tar.zst -o tiny.json >/dev/null || die "wds index failed"
w tiny batches tiny.tar.zst --mode exact --decode cls --batch-size 1000 --index tiny.json
expect_rc zstd_true_count_kept 0 tiny
lines zstd_true_count_batches tiny.out 3

# ----------------------------------------------------------------- zstd
zstd -q --long=31 -c <s-1.tar >w31.tar.zst || die "zstd --long=31 failed"
zstd -q --long=27 -c <s-1.tar >w27.tar.zst || die "zstd --long=27 failed"
"$WDS" ls s-1.tar >want.txt || die "wds ls failed"
MSG="the zstd frame at compressed offset 0 needs a 2 GiB window (as zstd --long=31 writes), over the limit of 128 MiB: raise the limit with --max-window 2G"
for tool in ls verify index cat bench; do
  w "$tool-31" "$tool" w31.tar.zst
  expect_rc "${tool}_long31_refused" 1 "$tool-31"
  # verify reports problems on stdout
  has "${tool}_long31_message" "$tool-31.$([[ $tool == verify ]] && echo out || echo err)" "$MSG"
  w "$tool-31ok" "$tool" --max-window 2G w31.tar.zst
  expect_rc "${tool}_long31_raised" 0 "$tool-31ok"
done
cmp -s ls-31ok.out want.txt && ok ls_long31_same_listing || bad ls_long31_same_listing "$(diff ls-31ok.out want.txt | head -5)"
w batches-31 batches w31.tar.zst --decode bin --batch-size 100
expect_rc batches_long31_refused 1 batches-31
has batches_long31_message batches-31.err "$MSG"
w batches-31ok batches w31.tar.zst --decode bin --batch-size 100 --max-window 2G
expect_rc batches_long31_raised 0 batches-31ok
lines batches_long31_batches batches-31ok.out 5
w write-31 write -o 'out-%d.tar' w31.tar.zst
expect_rc write_long31_refused 1 write-31
has write_long31_message write-31.err "$MSG"
w write-31ok write -o 'out-%d.tar' --max-window 2G w31.tar.zst
expect_rc write_long31_raised 0 write-31ok
w ls-27 ls w27.tar.zst
expect_rc long27_default_read 0 ls-27
w ls-27low ls --max-window 64M w27.tar.zst
expect_rc long27_lower_limit 1 ls-27low
has long27_lower_limit_message ls-27low.err "needs a 128 MiB window (as zstd --long=27 writes), over the limit of 64 MiB: raise the limit with --max-window 128M"
w badopt ls --max-window 2X w31.tar.zst
expect_rc max_window_usage 2 badopt
has max_window_usage_message badopt.err '--max-window needs a size in bytes'

# ---------------------------------------------------------------- names
"$PYTHON3" - <<'EOF' || die "cannot write the pax shard"
import io, tarfile
with tarfile.open("nul.tar", "w", format=tarfile.PAX_FORMAT) as t:
    for name, data, pax in (("a.txt", b"1", {}), ("x", b"22", {"path": "b\0c.txt"})):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        ti.pax_headers = pax
        t.addfile(ti, io.BytesIO(data))
names = tarfile.open("nul.tar").getnames()
assert names == ["a.txt", "b\0c.txt"], names  # tarfile keeps the member
EOF
w nul-ls ls nul.tar
expect_rc pax_nul_ls 1 nul-ls
has pax_nul_ls_message nul-ls.err 'nul.tar: member "b\0c.txt" at offset 1024: its name (pax path record) has a NUL byte at position 1'
w nul-verify verify nul.tar
expect_rc pax_nul_verify 1 nul-verify
has pax_nul_verify_message nul-verify.out 'member "b\0c.txt" at offset 1024'

echo "$passed passed, $failed failed"
((failed == 0))
