#!/usr/bin/env bash
# Tool test: `wds write` as users meet it, each check asserting
# the exit status and the message:
#
#   * -o NAME without %d: one file, any size; with --maxcount or --maxsize a
#     run that needs a second shard exits 1 naming the option, and no file
#     (nor temporary) is left; within the limits the one file is written;
#   * .JPEG/.jpeg/.JPG/.jpg: `verify --require jpg` (and JPG, jpeg) accepts
#     them all, `batches --decode jpg` decodes them, `cat --fields jpg`
#     keeps them, and wds-train's default fields read them;
#   * --labels on an ImageFolder tree: cls = the folder's index among the
#     sorted folder names (torchvision's numbering, computed here in
#     Python), classes.json beside the shards, the note about class order
#     without --shuffle, a seeded --shuffle deterministic and mixing
#     classes; without --labels a note points to it; wds-train trains on
#     the result (the issue's "has no field 'cls'" run); errors: a file
#     outside a class folder, a cls file already there, --labels on shards,
#     -o - without --classes;
#   * dots: "photo.2019.01.jpg" warns once with a count and an example;
#     --key-rule last-dot keys files up to the last '.' ('.' in the key
#     as '_'); two files that would make one member are an error;
#   * manifest typos: a path-like string naming no file exits 1 naming the
#     line and field, nothing written; --inline stores it as text; a
#     string that does not look like a path stays text.
#
# Usage: write_users.sh WDS_BINARY [WDS_TRAIN_BINARY]
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
TRAIN=${2:-}
[[ -z $TRAIN || $TRAIN == /* ]] || TRAIN=$PWD/$TRAIN
wds_test_setup write_users "timeout" "$1"

# nothing_like NAME GLOB: no file matches GLOB.
nothing_like() {
  local left
  left=$(compgen -G "$2" || true)
  if [[ -z $left ]]; then ok "$1"; else bad "$1" "left: $left"; fi
}

# ---- an ImageFolder tree with every JPEG spelling ----
"$PYTHON3" - <<'EOF'
import os
from PIL import Image
spell = ["jpg", "JPEG", "jpeg", "JPG"]
for c, name in enumerate(["cat", "dog", "owl"]):
    os.makedirs(f"imgs/{name}", exist_ok=True)
    for i in range(4):
        Image.new("RGB", (12, 10), (60 * c, 20 * i, 100)).save(
            f"imgs/{name}/img_{i}.{spell[i]}", format="JPEG")
EOF

# ---- -o without %d ----
w one1 write -o one.tar --maxcount 5 imgs
expect_rc "single file: --maxcount past it exits 1" 1 one1
has "single file: names the file and the limit" one1.err 'one.tar: the name has no %d'
has "single file: names the option" one1.err '-o one.tar names one file: --maxcount 5 needs a pattern with %d'
nothing_like "single file: nothing left (no file, no temporary)" 'one.tar*'
w one2 write -o one.tar --maxsize 5KB imgs
expect_rc "single file: --maxsize past it exits 1" 1 one2
has "single file: names --maxsize as given" one2.err '--maxsize 5KB needs a pattern with %d'
nothing_like "single file: nothing left after --maxsize" 'one.tar*'
printf '{"__key__": "a", "txt": "x"}\n{"__key__": "b", "txt": "y"}\n' >two.jsonl
w one3 write -o one.tar --maxcount 1 --manifest two.jsonl
expect_rc "single file: manifest input too" 1 one3
has "single file: manifest message names the option" one3.err '--maxcount 1 needs a pattern with %d'
w one4 write -o one.tar --maxcount 12 imgs
expect_rc "single file: within --maxcount, exit 0" 0 one4
has "single file: one shard of 12" one4.out 'wrote 1 shard, 12 samples'
w one5 write -o big.tar imgs
expect_rc "single file: no limit given, any size" 0 one5
w help write --help
has "single file: --help says so" help.out 'shard fails, and that file is not written'

# ---- JPEG spellings ----
w sp write -o 'sp-%02d.tar' imgs
expect_rc "spellings: written" 0 sp
w ls ls sp-00.tar
has "spellings: extensions as found, lower-cased by the reader" ls.out $'cat/img_1\tjpeg'
for req in jpg JPG jpeg 'png;jpg,jpg'; do
  w req verify sp-00.tar --require "$req"
  expect_rc "spellings: verify --require '$req' passes every spelling" 0 req
done
w reqp verify sp-00.tar --require png
expect_rc "spellings: verify --require png still fails" 1 reqp
has "spellings: and names the missing field" reqp.out 'missing_field: no field png'
w dec batches sp-00.tar --decode 'jpg:rgb:8' --batch-size 4
expect_rc "spellings: batches --decode jpg reads .JPEG/.jpeg" 0 dec
check "spellings: 3 batches of 4" test "$(wc -l <dec.out)" -eq 3
w dec2 batches sp-00.tar --decode 'JPEG:rgb:8' --batch-size 12
expect_rc "spellings: --decode JPEG reads .jpg too" 0 dec2
w cat cat --fields jpg sp-00.tar
expect_rc "spellings: cat --fields jpg" 0 cat
"$GTAR" -tf cat.out >cat.list
check "spellings: cat --fields jpg keeps .jpeg members too" test "$(grep -c '\.jpeg$' cat.list)" -eq 6 -a "$(wc -l <cat.list)" -eq 12

# ---- --labels ----
mkdir -p lab
w nolab write -o 'lab/n-%02d.tar' imgs
expect_rc "labels: without --labels, exit 0" 0 nolab
has "labels: a note points to --labels" nolab.err 'imgs looks like an ImageFolder tree (3 class folders): --labels adds class ids'
w lab write --labels -o 'lab/l-%02d.tar' imgs
expect_rc "labels: exit 0" 0 lab
has "labels: says where the mapping is" lab.err '3 classes (cat ... owl), mapping in lab/classes.json'
has "labels: warns about class order without --shuffle" lab.err 'samples are in class order (--shuffle mixes'
# torchvision's ImageFolder: classes = sorted(folder names), id = index.
"$PYTHON3" - imgs lab/l-00.tar lab/classes.json >lab.check <<'PY'
import json, os, sys, tarfile
root, shard, mapping = sys.argv[1:]
classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
want = {c: i for i, c in enumerate(classes)}
got_map = json.load(open(mapping))
ok = got_map == want
n = 0
with tarfile.open(shard) as t:
    for m in t.getmembers():
        if m.name.endswith(".cls"):
            n += 1
            cls = int(t.extractfile(m).read())
            ok &= cls == want[m.name.split("/")[0]]
print("ok" if ok and n == 12 else f"bad {got_map} {want} {n}")
PY
has "labels: ids and mapping as torchvision's ImageFolder numbers them" lab.check ok
w sh1 write --labels --shuffle --seed 4 -o 'lab/s1-%02d.tar' imgs
w sh2 write --labels --shuffle --seed 4 -o 'lab/s2-%02d.tar' --classes lab/other.json imgs
check "labels: --shuffle --seed is deterministic" cmp -s lab/s1-00.tar lab/s2-00.tar
check "labels: --classes names the mapping" cmp -s lab/classes.json lab/other.json
# The mapping is written once every sample is: a run that fails after the
# listing (here: no such output folder) leaves none behind.
w labfail write --labels --classes lab/fail.json -o 'lab/nodir/f-%02d.tar' imgs
expect_rc "labels: a failed write, exit 1" 1 labfail
has "labels: a failed write names the shard" labfail.err 'cannot create lab/nodir/f-00.tar'
check "labels: a failed write leaves no mapping" test ! -e lab/fail.json
"$WDS" ls lab/s1-00.tar | cut -d/ -f1 | head -4 | sort -u >sh.classes
check "labels: shuffled, the first 4 samples are not one class" test "$(wc -l <sh.classes)" -ge 2
if [[ -n $TRAIN ]]; then
  rc=0
  timeout 120 "$TRAIN" --train lab/s1-00.tar --classes 3 --image-size 8 --batch-size 4 \
    --epochs 1 --device cpu --workers 1 >train.out 2>train.err || rc=$?
  if ((rc == 0)); then ok "labels: wds-train trains on the labelled .JPEG/.jpg shards"; else
    bad "labels: wds-train trains on the labelled .JPEG/.jpg shards" "exit $rc" "$(tail -3 train.err)"; fi
  rc=0
  timeout 120 "$TRAIN" --train lab/n-00.tar --classes 3 --image-size 8 --batch-size 4 \
    --epochs 1 --device cpu --workers 1 >train2.out 2>train2.err || rc=$?
  check "labels: without them wds-train still says what is missing" \
    test $rc -ne 0 -a -n "$(grep -F "has no field 'cls'" train2.err)"
fi
cp -r imgs loose && printf 'x' >loose/stray.jpg
w loose write --labels -o 'lab/x-%02d.tar' loose
expect_rc "labels: a file outside a class folder exits 1" 1 loose
has "labels: and names it" loose.err '--labels: loose/stray.jpg is not in a class folder'
nothing_like "labels: nothing written" 'lab/x-*'
cp -r imgs hascls && printf '7' >hascls/dog/img_1.cls
w hascls write --labels -o 'lab/y-%02d.tar' hascls
expect_rc "labels: a cls file already there exits 1" 1 hascls
has "labels: and names it" hascls.err '--labels: hascls/dog/img_1.cls: the sample already has a cls field'
w labsp write --labels -o 'lab/z-%02d.tar' sp-00.tar
expect_rc "labels: on shards is a usage error" 2 labsp
has "labels: says DIR only" labsp.err '--labels applies to a DIR input only'
w labout write --labels -o - imgs
expect_rc "labels: -o - without --classes is a usage error" 2 labout
has "labels: says to name the mapping" labout.err '--labels with -o -: name the class mapping file with --classes FILE'

# ---- dots in file names ----
mkdir -p dots/cat
printf 'a' >dots/cat/photo.2019.01.jpg
printf 'b' >dots/cat/photo.2019.02.jpg
printf 'c' >dots/cat/snap.2020.05.jpg
printf 'd' >dots/cat/plain.jpg
printf 'e' >dots/cat/plain.seg.png
w dot write -o 'dot-%d.tar' dots
expect_rc "dots: first-dot still exit 0" 0 dot
has "dots: one warning with a count and an example" dot.err "2 samples have only extensions with a '.' in them, e.g. \"cat/photo\" with 2019.01.jpg, 2019.02.jpg"
has "dots: and names the option" dot.err '--key-rule last-dot keys them up to the last'
check "dots: warned once" test "$(grep -c 'only extensions' dot.err)" -eq 1
"$WDS" ls dot-0.tar >dot.ls
has "dots: webdataset's rule kept by default" dot.ls $'cat/photo\t2019.01.jpg 1\t2019.02.jpg 1'
w last write --key-rule last-dot -o 'last-%d.tar' dots
expect_rc "dots: --key-rule last-dot exit 0" 0 last
check "dots: --key-rule last-dot, no warning" test ! -s last.err
"$WDS" ls last-0.tar >last.ls
printf 'cat/photo_2019_01\tjpg 1\ncat/photo_2019_02\tjpg 1\ncat/plain\tjpg 1\ncat/plain_seg\tpng 1\ncat/snap_2020_05\tjpg 1\n' >last.want
check "dots: keys up to the last '.', '.' in them as '_'" cmp -s last.ls last.want
printf 'f' >dots/cat/photo_2019_01.jpg
w clash write --key-rule last-dot -o 'clash-%d.tar' dots
expect_rc "dots: two files making one member exit 1" 1 clash
has "dots: names both" clash.err 'would both be the member "cat/photo_2019_01.jpg"'
has "dots: names the dotted file" clash.err 'dots/cat/photo.2019.01.jpg'
w kr write --key-rule middle -o 'kr-%d.tar' dots
expect_rc "dots: a bad --key-rule is a usage error" 2 kr

# ---- manifest typos ----
mkdir -p man/train/cat
printf 'IMG' >man/train/cat/img_001.jpg
cat >man/typo.jsonl <<'JL'
{"__key__": "a", "jpg": "train/cat/img_001.jpg", "cls": 0}
{"__key__": "b", "jpg": "train/cat/img_999.jpg", "cls": 0}
JL
w typo write -o 'typo-%d.tar' --manifest man/typo.jsonl
expect_rc "manifest: a path naming no file exits 1" 1 typo
has "manifest: names the line, field and value" typo.err 'manifest man/typo.jsonl, line 2: field "jpg": "train/cat/img_999.jpg" looks like a path but names no file (relative to man)'
has "manifest: points to --inline" typo.err '--inline keeps every string as text'
nothing_like "manifest: nothing written on a typo" 'typo-*'
printf '{"__key__": "c", "jpg": "img_999.JPG"}\n' >man/typo2.jsonl
w typo2 write -o 'typo2-%d.tar' --manifest man/typo2.jsonl
expect_rc "manifest: a value ending in its field's extension exits 1" 1 typo2
has "manifest: line 1" typo2.err 'line 1: field "jpg": "img_999.JPG" looks like a path'
printf '{"__key__": "d", "jpg": "train/cat"}\n' >man/typo3.jsonl
w typo3 write -o 'typo3-%d.tar' --manifest man/typo3.jsonl
expect_rc "manifest: a path naming a directory exits 1" 1 typo3
has "manifest: says it is not a file" typo3.err 'looks like a path but is not a regular file'
w inl write -o 'inl-%d.tar' --inline --manifest man/typo.jsonl
expect_rc "manifest: --inline keeps it" 0 inl
check "manifest: --inline stores the text" test "$("$GTAR" -xOf inl-0.tar b.jpg)" = train/cat/img_999.jpg
printf '{"__key__": "e", "jpg": "train/cat/img_001.jpg", "txt": "and/or"}\n' >man/mixed.jsonl
w mixed write -o 'mixed-%d.tar' --manifest man/mixed.jsonl
expect_rc "manifest: a txt value with '/' looks like a path too" 1 mixed
has "manifest: names that field" mixed.err 'field "txt": "and/or" looks like a path'
printf '{"__key__": "e", "jpg": "train/cat/img_001.jpg", "note": "see a.jpg", "txt": "plain words"}\n' >man/fine.jsonl
w fine write -o 'fine-%d.tar' --manifest man/fine.jsonl
expect_rc "manifest: text that does not look like a path stays text" 0 fine
check "manifest: the file is read" test "$("$GTAR" -xOf fine-0.tar e.jpg)" = IMG
check "manifest: the text is kept" test "$("$GTAR" -xOf fine-0.tar e.note)" = "see a.jpg"

echo "$passed passed, $failed failed"
((failed == 0))
