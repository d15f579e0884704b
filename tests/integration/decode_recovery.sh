#!/usr/bin/env bash
# Tool test: a corrupt image does not spoil the good ones decoded after it,
# with the real tools on directories of images made from
# the fuzz corpus (tests/fuzz/corpus/decode) and written by `wds write`.
#
#   report  the reported case: three copies of tiny420.jpg (keys a, b, c),
#           the first cut after 492 bytes (inside its headers, before SOS):
#           `wds verify --decode` finds exactly 1 problem, in sample a
#           (it used to find 2: the good b failed after a).
#   many    1,000 samples, JPEGs and PNGs in turn, 100 of them cut (JPEGs
#           anywhere, PNGs before the end of their image data): verify
#           finds exactly those 100; `wds batches --on-error skip` marks
#           exactly those rows invalid with 1, 2 and 4 workers (it used to
#           mark 796 to 973 of the 1,000).
#
# Usage: decode_recovery.sh WDS_BINARY
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
# Set WDS_TEST_KEEP=1 to keep the temporary directory.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup decode_recovery "timeout" "$@"
CORPUS=$HERE/../fuzz/corpus/decode

W_TIMEOUT=300 # w (common.sh): the 1,000-sample runs under ASan
# same NAME GOT WANT: the two texts are equal.
same() {
  if [[ $2 == "$3" ]]; then ok "$1"; else bad "$1" "got:  $(head -c 400 <<<"$2")" "want: $(head -c 400 <<<"$3")"; fi
}
# problems OUT: "N KEY,KEY,..." from `wds verify --json` output, decode
# problems only.
problems() {
  "$PYTHON3" -c '
import json, sys
r = json.load(open(sys.argv[1]))
keys = sorted(p["key"] for p in r["problems"] if p["kind"] == "decode")
print(r["problem_count"], ",".join(keys))' "$1"
}

# ---- the report ----
mkdir three
head -c 492 "$CORPUS/tiny420.jpg" >three/a.jpg
cp "$CORPUS/tiny420.jpg" three/b.jpg
cp "$CORPUS/tiny420.jpg" three/c.jpg
mkdir out3
"$WDS" write -o 'out3/s-%04d.tar' three >write3.out 2>&1 || die "wds write: $(cat write3.out)"
w v3 verify --decode 'out3/s-0000.tar'
same report_exit "$RC" 1
if grep -qF "1 problem (decode 1)" v3.out; then ok report_one_problem; else bad report_one_problem "$(cat v3.out)"; fi
w v3j verify --decode --json 'out3/s-0000.tar'
same report_problem_is_a "$(problems v3j.out)" "1 a"

# ---- 1,000 samples, 100 corrupt ----
"$PYTHON3" - "$CORPUS" <<'EOF' || die "cannot make the image directory"
import os, random, sys

corpus = sys.argv[1]
names = ["tiny420.jpg", "tiny444-progressive.jpg", "tiny-gray.jpg",
         "tiny-cmyk.jpg", "tiny-rgb.png", "tiny-interlaced16.png",
         "tiny-p-trns.png"]
images = [(n, open(os.path.join(corpus, n), "rb").read()) for n in names]
rng = random.Random(10)
os.mkdir("many")
corrupt = []
for i in range(1000):
    name, data = images[i % len(images)]
    ext = name.rsplit(".", 1)[1]
    key = "s%04d" % i
    if i % 10 == 3:
        if ext == "png":  # libpng stops at the end of the image data
            end = data.index(b"IEND") - 4 - 4  # the last IDAT's CRC
            data = data[: rng.randrange(8, end)]
        else:
            data = data[: rng.randrange(2, len(data) - 1)]
        corrupt.append(key)
    with open("many/%s.%s" % (key, ext), "wb") as f:
        f.write(data)
with open("corrupt.txt", "w") as f:
    f.write("100 " + ",".join(corrupt) + "\n")
EOF
mkdir outm
"$WDS" write -o 'outm/s-%04d.tar' --maxcount 100 many >writem.out 2>&1 || die "wds write: $(cat writem.out)"
SPEC='outm/s-{0000..0009}.tar'
WANT=$(cat corrupt.txt)
w vm verify --decode --json "$SPEC"
same many_verify_exit "$RC" 1
same many_verify_problems "$(problems vm.out)" "$WANT"

for workers in 1 2 4; do
  w "b$workers" batches "$SPEC" --decode 'jpg;png:rgb:24' --on-error skip \
    --workers "$workers" --batch-size 32 --no-shard-shuffle --json
  same "many_batches_w${workers}_exit" "$RC" 0
  got=$("$PYTHON3" -c '
import json, sys
rows = [(k, v) for line in open(sys.argv[1])
        for b in [json.loads(line)] for k, v in zip(b["keys"], b["valid"])]
bad = sorted(k for k, v in rows if not v)
print(len(rows), len(bad), ",".join(bad))' "b$workers.out")
  same "many_batches_w${workers}_invalid_rows" "$got" "1000 $WANT"
done

echo "$passed passed, $failed failed"
((failed == 0))
