#!/usr/bin/env bash
# Tool test: `wds index`, `wds ls --summary --index`, `wds verify`, `wds cat`.
#
# Shards are made at test time: `wds synth` (4 shards x 6 samples, fields
# .bin/.cls/.json), and with Python's tarfile a PAX shard with long and
# non-ASCII keys and a shard of PIL JPEGs + .cls; defective shards are
# derived from them. Checks:
#   index   counts, keys, sizes and offsets equal `wds ls --json` and
#           Python's tarfile (member offset, data bytes at offset); urls
#           relative to the index's directory (also "../"), and the pair
#           still works when moved; the loader's exact mode gives the same
#           batches with and without --index; `ls --summary --index` equals
#           the scanned summary (text and JSON); a modified shard makes the
#           index stale (error naming it and both sizes); an unreadable
#           shard exits 1 and leaves no index file.
#   verify  a clean set: exit 0 and "no problems"; each planted defect
#           (truncated, flipped header checksum byte, duplicate extension,
#           non-adjacent repeated key, missing --require field, corrupt JPEG
#           with --decode, missing file) caught alone and all together;
#           --json parses and has the right counts; usage errors exit 2.
#   cat     piped into tar: the members in order; --fields; --limit;
#           --shuffle with one seed twice gives identical bytes, another
#           seed another order, the same multiset of samples; refuses a
#           terminal; cat | wds write round trip (when `wds write` exists).
#
# Usage: index_verify_cat.sh WDS_BINARY [SHARED_TESTDATA]  (second unused)
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
# Set WDS_TEST_KEEP=1 to keep the temporary directory.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup index_verify_cat "timeout cmp sort" "$@"
"$PYTHON3" -c 'import PIL' 2>/dev/null ||
  die "$PYTHON3 has no PIL (apt-get install python3-pil)"


# ---- fixtures ----
mkdir d
"$WDS" synth --shards 4 --samples 6 --size 300 --seed 7 'd/a-%03d.tar' >/dev/null ||
  die "wds synth failed"
SPEC='d/a-{000..003}.tar'
"$PYTHON3" - <<'EOF' || die "cannot make the Python shards"
import io, tarfile, random
from PIL import Image

def add(tf, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 0
    tf.addfile(ti, io.BytesIO(data))

# PAX shard: long keys (extended headers), a non-ASCII key, a directory.
with tarfile.open("d/p-000.tar", "w", format=tarfile.PAX_FORMAT) as tf:
    for i in range(5):
        key = "dir/" + "k" * (110 + i) + "%d" % i if i % 2 == 0 else "caf\u00e9-%d" % i
        add(tf, key + ".txt", b"text %d" % i * (i + 1))
        add(tf, key + ".cls", b"%d" % i)

def jpeg(seed, size=(40, 30)):
    rnd = random.Random(seed)
    img = Image.new("RGB", size)
    img.putdata([(rnd.randrange(256), rnd.randrange(256), rnd.randrange(256))
                 for _ in range(size[0] * size[1])])
    b = io.BytesIO()
    img.save(b, "JPEG", quality=90)
    return b.getvalue()

with tarfile.open("d/img-000.tar", "w", format=tarfile.GNU_FORMAT) as tf:
    for i in range(4):
        add(tf, "img%02d.jpg" % i, jpeg(i))
        add(tf, "img%02d.cls" % i, b"%d" % (i % 3))

# Defects.
with tarfile.open("d/bad-dupext.tar", "w", format=tarfile.GNU_FORMAT) as tf:
    add(tf, "x0.cls", b"1"); add(tf, "x0.txt", b"a"); add(tf, "x0.cls", b"2")
    add(tf, "x1.cls", b"3"); add(tf, "x1.txt", b"b")
with tarfile.open("d/bad-rekey.tar", "w", format=tarfile.GNU_FORMAT) as tf:
    add(tf, "r0.cls", b"1"); add(tf, "r1.cls", b"2"); add(tf, "r0.txt", b"x")
with tarfile.open("d/bad-jpeg.tar", "w", format=tarfile.GNU_FORMAT) as tf:
    good = jpeg(10)
    add(tf, "j0.jpg", good); add(tf, "j0.cls", b"0")
    add(tf, "j1.jpg", good[: len(good) // 2]); add(tf, "j1.cls", b"1")
    add(tf, "j2.jpg", b"\xff\xd8\xff\xe0garbage"); add(tf, "j2.cls", b"x")
data = open("d/a-000.tar", "rb").read()
open("d/bad-trunc.tar", "wb").write(data[:2500])
# The header of the second member (at 1024: 512 header + 300 data padded to
# 512): one name byte changed, so its checksum no longer matches.
b = bytearray(data)
b[1024 + 3] ^= 0x20
open("d/bad-cksum.tar", "wb").write(bytes(b))
EOF

# ---- index ----
w ix index -o d/idx.json "$SPEC" 'd/p-000.tar' 'd/img-000.tar'
expect_rc index_ok 0 ix
w lsj ls --json "$SPEC" 'd/p-000.tar' 'd/img-000.tar'
expect_rc index_lsjson 0 lsj
if "$PYTHON3" - d/idx.json lsj.out >pycheck.txt 2>&1 <<'EOF'; then ok index_matches_ls_and_tarfile; else bad index_matches_ls_and_tarfile "$(cat pycheck.txt)"; fi
import hashlib, json, os, sys, tarfile
ix = json.load(open(sys.argv[1]))
rows = [json.loads(l) for l in open(sys.argv[2])]
assert ix["wids_version"] == 1 and ix["__kind__"] == "wds-shard-index", ix.keys()
base = os.path.dirname(sys.argv[1])
urls = [s["url"] for s in ix["shardlist"]]
assert urls == ["a-000.tar", "a-001.tar", "a-002.tar", "a-003.tar",
                "p-000.tar", "img-000.tar"], urls
got = []
for sh in ix["shardlist"]:
    path = os.path.join(base, sh["url"])
    assert sh["filesize"] == os.path.getsize(path), sh["url"]
    assert sh["nsamples"] == len(sh["samples"]), sh["url"]
    raw = open(path, "rb").read()
    members = {}
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            if m.isfile():
                members[m.offset] = m
    for smp in sh["samples"]:
        fields = {}
        for ext, (off, size) in smp["fields"].items():
            m = members[off]  # the member's first header is at OFFSET
            assert m.name == smp["key"] + "." + ext, (m.name, smp["key"], ext)
            assert m.size == size, (m.name, m.size, size)
            data = raw[m.offset_data:m.offset_data + size]
            fields[ext] = {"size": size, "sha256": hashlib.sha256(data).hexdigest()}
        got.append({"__key__": smp["key"], "fields": fields, "url": sh["url"]})
assert len(got) == len(rows) == 4 * 6 + 5 + 4, (len(got), len(rows))
for g, r in zip(got, rows):
    assert g["__key__"] == r["__key__"], (g["__key__"], r["__key__"])
    assert os.path.basename(r["__url__"]) == g["url"]
    assert g["fields"] == r["fields"], (g, r)
# at least one member with extended headers: its data is not right after
# the first header
assert any(len(s["key"]) > 100 for s in ix["shardlist"][4]["samples"])
print("ok")
EOF

# Without -o: urls as given, on stdout.
w ixs index "$SPEC"
expect_rc index_stdout 0 ixs
check index_stdout_urls_as_given "$PYTHON3" -c '
import json, sys
ix = json.load(open(sys.argv[1]))
assert [s["url"] for s in ix["shardlist"]] == ["d/a-%03d.tar" % i for i in range(4)]
assert ix["name"] == "d/a-{000..003}.tar"' ixs.out

# An index in a subdirectory: "../" urls.
mkdir d/sub
w ixsub index -o d/sub/idx.json "$SPEC"
expect_rc index_subdir 0 ixsub
check index_subdir_urls "$PYTHON3" -c '
import json, sys
ix = json.load(open(sys.argv[1]))
assert [s["url"] for s in ix["shardlist"]] == ["../a-%03d.tar" % i for i in range(4)], ix' d/sub/idx.json

# The loader's exact mode: the same batches with and without the index.
LOPTS=(--decode cls --mode exact --batch-size 4 --world 2 --rank 1 --workers 2)
w counted batches "$SPEC" "${LOPTS[@]}"
w indexed batches "$SPEC" "${LOPTS[@]}" --index d/idx.json
if [[ $RC == 0 ]] && [[ -s counted.out ]] && cmp -s counted.out indexed.out; then
  ok loader_exact_index
else
  bad loader_exact_index "exit $RC" "$(head -c 400 indexed.err)"
fi
w indexed_sub batches "$SPEC" "${LOPTS[@]}" --index d/sub/idx.json
if [[ $RC == 0 ]] && cmp -s counted.out indexed_sub.out; then ok loader_exact_index_parent_urls; else bad loader_exact_index_parent_urls "$(head -c 400 indexed_sub.err)"; fi
# Moved together, used from another directory.
cp -r d moved
(cd moved && timeout 120 "$WDS" batches 'a-{000..003}.tar' "${LOPTS[@]}" --index idx.json >../moved.out 2>../moved.err) &&
  cmp -s counted.out moved.out && ok index_moved_with_shards ||
  bad index_moved_with_shards "$(head -c 400 moved.err)"

# ls --summary --index = the scanned summary.
for fmt in text json; do
  flag=()
  [[ $fmt == json ]] && flag=(--json)
  w scan_$fmt ls --summary "${flag[@]}" "$SPEC" 'd/p-000.tar' 'd/img-000.tar'
  w fromix_$fmt ls --summary "${flag[@]}" --index d/idx.json "$SPEC" 'd/p-000.tar' 'd/img-000.tar'
  if [[ $RC == 0 ]] && [[ -s scan_$fmt.out ]] && cmp -s scan_$fmt.out fromix_$fmt.out; then
    ok ls_summary_index_$fmt
  else
    bad ls_summary_index_$fmt "exit $RC" "$(diff scan_$fmt.out fromix_$fmt.out | head -20)" "$(head -c 300 fromix_$fmt.err)"
  fi
done
w lsix_sub ls --summary --index d/sub/idx.json "$SPEC"
if [[ $RC == 0 ]] && grep -q '^samples *24$' lsix_sub.out; then ok ls_summary_index_parent_urls; else bad ls_summary_index_parent_urls "$(cat lsix_sub.out lsix_sub.err)"; fi
w lsix_missing ls --summary --index d/sub/idx.json 'd/p-000.tar'
expect_rc ls_summary_index_not_listed 1 lsix_missing
has ls_summary_index_not_listed_msg lsix_missing.err "not in the index"
w lsix_noss ls --index d/idx.json "$SPEC"
expect_rc ls_index_needs_summary 2 lsix_noss

# Stale: a shard rewritten with another size.
cp -r d stale
"$WDS" synth --shards 1 --samples 6 --size 700 --seed 7 'stale/a-%03d.tar' >/dev/null
w stale ls --summary --index stale/idx.json 'stale/a-{000..003}.tar'
expect_rc index_stale_ls 1 stale
has index_stale_ls_names_shard stale.err "stale/a-000.tar"
has index_stale_ls_msg stale.err "stale index"
newsize=$(stat -c %s stale/a-000.tar)
has index_stale_ls_sizes stale.err "was $(stat -c %s d/a-000.tar) bytes, is $newsize"
w stale_loader batches 'stale/a-{000..003}.tar' "${LOPTS[@]}" --index stale/idx.json
expect_rc index_stale_loader 1 stale_loader
has index_stale_loader_msg stale_loader.err "stale index"

# An unreadable shard: exit 1 naming it, no index left behind.
w ixbad index -o out-idx.json "$SPEC" d/missing.tar
expect_rc index_missing_shard 1 ixbad
has index_missing_shard_named ixbad.err "d/missing.tar"
check index_missing_no_file test ! -e out-idx.json
check index_missing_no_temp test -z "$(ls -A | grep out-idx || true)"
w ixtr index -o out-idx.json d/bad-trunc.tar
expect_rc index_truncated_shard 1 ixtr
has index_truncated_named ixtr.err "d/bad-trunc.tar"
check index_truncated_no_file test ! -e out-idx.json
w ixu index
expect_rc index_usage 2 ixu

# ---- verify ----
w vclean verify --require 'cls' "$SPEC" 'd/p-000.tar'
expect_rc verify_clean 0 vclean
has verify_clean_msg vclean.out "no problems"
has verify_clean_counts vclean.out "verified 5 shards, 29 samples"
w vclean_img verify --decode --require 'jpg;png,cls' 'd/img-000.tar'
expect_rc verify_clean_decode 0 vclean_img
has verify_clean_decode_msg vclean_img.out "no problems"
# One shard: the summary's plural follows the count ("verified 1 shard,").
has verify_one_shard_singular vclean_img.out "verified 1 shard, "

# verify_one NAME SPEC KIND N TEXT [ARGS...]: exit 1, a line with KIND and
# TEXT naming the shard, and the summary counting N of KIND.
verify_one() {
  local name=$1 spec=$2 kind=$3 n=$4 text=$5
  shift 5
  w "v_$name" verify "$@" "$spec"
  expect_rc "verify_${name}" 1 "v_$name"
  if grep -F -- "$spec: " "v_$name.out" | grep -F -- "$kind" | grep -qF -- "$text"; then
    ok "verify_${name}_line"
  else
    bad "verify_${name}_line" "no '$spec: ... $kind ... $text' in:" "$(head -c 800 "v_$name.out")"
  fi
  has "verify_${name}_summary" "v_$name.out" "$n problem"
  has "verify_${name}_summary_kind" "v_$name.out" "($kind $n)"
}
verify_one truncated d/bad-trunc.tar truncated 1 "truncated"
verify_one checksum d/bad-cksum.tar checksum 1 "checksum"
verify_one dupext d/bad-dupext.tar duplicate_extension 1 'duplicate extension "cls"'
verify_one rekey d/bad-rekey.tar repeated_key 1 "sample r0: repeated_key"
# jpeg: j1 is cut in half, j2 is not a JPEG, and j2's cls is not a number.
verify_one jpeg d/bad-jpeg.tar decode 3 "sample j1: decode: field jpg" --decode
has verify_jpeg_j2 v_jpeg.out "sample j2: decode: field cls"
verify_one missing_file d/missing.tar unreadable 1 "d/missing.tar"
w v_req verify --require 'cls,txt;npy' d/a-000.tar
expect_rc verify_require 1 v_req
has verify_require_line v_req.out "d/a-000.tar: sample sample000000000: missing_field: no field txt;npy"
has verify_require_summary v_req.out "6 problems (missing_field 6)"
w v_nodecode verify d/bad-jpeg.tar
expect_rc verify_jpeg_needs_decode 0 v_nodecode

# Everything together, and --json.
ALL=(d/a-001.tar d/bad-trunc.tar d/bad-cksum.tar d/bad-dupext.tar d/bad-rekey.tar
  d/bad-jpeg.tar d/missing.tar d/img-000.tar)
w vall verify --decode --require cls "${ALL[@]}"
expect_rc verify_all 1 vall
has verify_all_summary vall.out "verified 8 shards"
for k in truncated checksum duplicate_extension repeated_key decode unreadable; do
  has "verify_all_$k" vall.out "$k "
done
w vjson verify --json --decode --require 'cls,jpg' "${ALL[@]}"
expect_rc verify_json_rc 1 vjson
if "$PYTHON3" - vjson.out >pyv.txt 2>&1 <<'EOF'; then ok verify_json_counts; else bad verify_json_counts "$(cat pyv.txt)"; fi
import collections, json, sys
v = json.load(open(sys.argv[1]))
probs = v["problems"]
c = collections.Counter(p["kind"] for p in probs)
assert v["shards"] == 8, v["shards"]
assert v["problem_count"] == len(probs), (v["problem_count"], len(probs))
assert {k: n for k, n in v["counts"].items() if n} == dict(c), (v["counts"], c)
# missing jpg: a-001 (6), dupext x1 (1: x0 is dropped by the reader), rekey
# (3 samples: r0, r1, r0 again, the last one without cls either: 3 + 1).
want = {"truncated": 1, "checksum": 1, "duplicate_extension": 1,
        "repeated_key": 1, "decode": 3, "unreadable": 1,
        "missing_field": 6 + 1 + 3 + 1}
assert dict(c) == want, dict(c)
for p in probs:
    assert p["url"].startswith("d/"), p
    assert p["message"], p
rk = [p for p in probs if p["kind"] == "repeated_key"][0]
assert rk["key"] == "r0" and rk["url"] == "d/bad-rekey.tar", rk
assert [p for p in probs if p["kind"] == "unreadable"][0]["key"] is None
# a-001 6, the truncated and checksum shards none (both fail in sample 0),
# dupext 1 (x0 dropped), rekey 3, bad-jpeg 3, img 4
assert v["samples"] == 6 + 0 + 0 + 1 + 3 + 3 + 0 + 4, v["samples"]
print("ok")
EOF
w vclean_json verify --json "$SPEC"
check verify_json_clean "$PYTHON3" -c '
import json, sys
v = json.load(open(sys.argv[1]))
assert v["problems"] == [] and v["problem_count"] == 0 and v["samples"] == 24, v' vclean_json.out
w vu1 verify
expect_rc verify_usage_nospec 2 vu1
w vu2 verify --require 'jpg,,cls' d/a-000.tar
expect_rc verify_usage_require 2 vu2
w vu3 verify --bogus d/a-000.tar
expect_rc verify_usage_flag 2 vu3

# ---- cat ----
members() { "$GTAR" -tf - ; }
"$WDS" cat "$SPEC" >cat.tar 2>cat.err && ok cat_runs || bad cat_runs "$(cat cat.err)"
members <cat.tar >cat.list
"$WDS" ls --json "$SPEC" | "$PYTHON3" -c '
import json, sys
for l in sys.stdin:
    r = json.loads(l)
    for e in sorted(r["fields"]):
        print(r["__key__"] + "." + e)' >want.list
check cat_members cmp -s cat.list want.list
w cat_ls ls --json - <cat.tar
"$WDS" ls --json "$SPEC" | sed 's/"__url__": "[^"]*"//' >want.ls
sed 's/"__url__": "[^"]*"//' cat_ls.out >got.ls
check cat_same_samples cmp -s want.ls got.ls

"$WDS" cat --fields cls,JSON "$SPEC" | members >f.list
grep -E '\.(cls|json)$' want.list >want_f.list
check cat_fields cmp -s f.list want_f.list
"$WDS" cat --fields npy "$SPEC" | members >none.list
check cat_fields_none_dropped test ! -s none.list
"$WDS" cat --limit 5 "$SPEC" | members >lim.list
head -15 want.list >want_lim.list
check cat_limit cmp -s lim.list want_lim.list

"$WDS" cat --shuffle 10 --seed 3 "$SPEC" >s3a.tar
"$WDS" cat --shuffle 10 --seed 3 "$SPEC" >s3b.tar
"$WDS" cat --shuffle 10 --seed 4 "$SPEC" >s4.tar
check cat_shuffle_same_seed cmp -s s3a.tar s3b.tar
check cat_shuffle_other_seed_differs test "$(members <s3a.tar)" != "$(members <s4.tar)"
check cat_shuffle_changes_order test "$(members <s3a.tar)" != "$(cat want.list)"
for f in s3a s4; do
  "$WDS" ls --json - <$f.tar | sed 's/"__url__": "[^"]*"//' | sort >$f.sorted
done
sort want.ls >want.sorted
check cat_shuffle_same_multiset_3 cmp -s s3a.sorted want.sorted
check cat_shuffle_same_multiset_4 cmp -s s4.sorted want.sorted
"$WDS" cat --shuffle 10 --seed 3 --limit 7 "$SPEC" | members >sl.list
check cat_shuffle_limit test "$(wc -l <sl.list)" = 21

# A terminal on stdout: refused (exit 2) unless -f.
if "$PYTHON3" - "$WDS" d/a-000.tar >pty.txt 2>&1 <<'EOF'; then ok cat_refuses_terminal; else bad cat_refuses_terminal "$(cat pty.txt)"; fi
import os, pty, subprocess, sys, threading
m, s = pty.openpty()
def drain():  # the terminal must be read, or a writer to it blocks
    try:
        while os.read(m, 65536):
            pass
    except OSError:
        pass
threading.Thread(target=drain, daemon=True).start()
p = subprocess.run([sys.argv[1], "cat", sys.argv[2]], stdout=s, stderr=subprocess.PIPE, timeout=60)
assert p.returncode == 2, p.returncode
assert b"terminal" in p.stderr, p.stderr
p = subprocess.run([sys.argv[1], "cat", "-f", "--limit", "1", sys.argv[2]], stdout=s,
                   stderr=subprocess.PIPE, timeout=60)
assert p.returncode == 0, (p.returncode, p.stderr)
print("ok")
EOF
w cat_missing cat d/a-000.tar d/missing.tar
expect_rc cat_missing_shard 1 cat_missing
has cat_missing_named cat_missing.err "d/missing.tar"
w cat_usage cat --shuffle x d/a-000.tar
expect_rc cat_usage 2 cat_usage

# Round trip through `wds write` (another engineer's command).
if "$WDS" write --help >/dev/null 2>&1; then
  mkdir rt
  if "$WDS" cat "$SPEC" | "$WDS" write -o 'rt/b-%04d.tar' --maxcount 5 - >rt.out 2>rt.err; then
    "$WDS" ls --json 'rt/b-{0000..0004}.tar' | sed 's/"__url__": "[^"]*"//' >rt.ls
    check cat_write_round_trip cmp -s rt.ls want.ls
    check cat_write_shard_count test -e rt/b-0004.tar -a ! -e rt/b-0005.tar
  else
    bad cat_write_round_trip "$(cat rt.err)"
  fi
  # The issue's example: zstd shards, --maxcount 5000.
  if "$WDS" cat 'd/a-{000..003}.tar' | "$WDS" write -o 'rt/z-%04d.tar.zst' --maxcount 5000 - >rtz.out 2>rtz.err; then
    "$WDS" ls --json 'rt/z-0000.tar.zst' | sed 's/"__url__": "[^"]*"//' >rtz.ls
    check cat_write_zst_round_trip cmp -s rtz.ls want.ls
    check cat_write_zst_one_shard test ! -e rt/z-0001.tar.zst
  else
    bad cat_write_zst_round_trip "$(cat rtz.err)"
  fi
else
  echo "SKIP cat_write_round_trip: 'wds write' is not available in this build"
fi

echo "$passed passed, $failed failed"
((failed == 0))
