#!/usr/bin/env bash
# Tool test: names from shards and trees reach the terminal escaped (issue
# 26, item 9). A key holding a newline, a tab, ESC ] 0;title BEL (sets a
# terminal's title), ESC [2J (clears the screen), a C1 control (U+009B,
# CSI to some terminals) and a byte that is not UTF-8:
#   * wds ls prints one line per sample (10 for 10), the key as \xHH; its
#     --summary an extension so;
#   * an error naming such a member (a duplicate extension) prints no raw
#     control character, in wds ls, wds verify's report and wds batches;
#   * wds-train's "source N:" line, for a spec file so named;
#   * wds write --labels's class note, for a class folder so named.
# Text for people escapes control characters, DEL, C1 controls and bytes
# that are not UTF-8 as \xHH (base/text.h); JSON output escapes by JSON
# (checked too: wds ls --json holds the key exactly).
#
# Usage: terminal.sh WDS_BINARY WDS_TRAIN_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup terminal "timeout" "$@"
TRAIN=${2:?usage: terminal.sh WDS_BINARY WDS_TRAIN_BINARY}
[[ $TRAIN == /* ]] || TRAIN=$OLDPWD/$TRAIN
[[ -x $TRAIN ]] || die "wds-train binary '$TRAIN' not found"

# raw NAME FILE...: no control character but newline and tab (wds ls's
# separators) in the files (ESC, BEL, CR, C1 as UTF-8), and no byte that
# is not UTF-8.
raw() {
  local name=$1
  shift
  if "$PYTHON3" - "$@" <<'PY'; then ok "$name: nothing raw"; else bad "$name: nothing raw" "$(head -c 300 "$@" | od -c | head -5)"; fi
import sys
for f in sys.argv[1:]:
    b = open(f, "rb").read()
    t = b.decode("utf-8")  # raises on bytes that are not UTF-8
    bad = [c for c in t if (ord(c) < 0x20 and c not in "\n\t") or 0x7f <= ord(c) <= 0x9f]
    if bad:
        sys.exit(1)
PY
}

KEY=$'a\nb\tc\e]0;title\a\e[2J\xc2\x9b\xff'
SHOWN='a\x0ab\x09c\x1b]0;title\x07\x1b[2J\xc2\x9b\xff'
"$PYTHON3" - <<'PY' || die "making the shards"
import io, tarfile
def add(t, name, data):
    ti = tarfile.TarInfo(name); ti.size = len(data); ti.mtime = 0
    t.addfile(ti, io.BytesIO(data))
key = "a\nb\tc\x1b]0;title\x07\x1b[2J\u009b" + "\udcff"
with tarfile.open("keys.tar", "w", format=tarfile.PAX_FORMAT, encoding="utf-8",
                  errors="surrogateescape") as t:
    for i in range(10):
        k = key if i == 3 else "s%d" % i
        add(t, k + ".txt", b"hello")
        add(t, k + ".cls", b"1")
with tarfile.open("dup.tar", "w", format=tarfile.PAX_FORMAT, encoding="utf-8",
                  errors="surrogateescape") as t:
    add(t, key + ".txt", b"hello")
    add(t, key + ".txt", b"again")
PY

# ---- wds ls ----
"$WDS" ls keys.tar >ls.out 2>ls.err || bad "ls: exits 0" "$(head -3 ls.err)"
check "ls: one line per sample" test "$(wc -l <ls.out)" = 10
check "ls: the key escaped" test "$(sed -n 4p ls.out)" = "$SHOWN"$'\ttxt 5\tcls 1'
raw "ls" ls.out ls.err
"$PYTHON3" - <<'PY' || die "making ext.tar"
import io, tarfile
with tarfile.open("ext.tar", "w", format=tarfile.PAX_FORMAT) as t:
    ti = tarfile.TarInfo("k.t\x1b[2jxt"); ti.size = 1
    t.addfile(ti, io.BytesIO(b"x"))
PY
"$WDS" ls --summary ext.tar >sum.out 2>sum.err || bad "ls --summary: exits 0" "$(head -3 sum.err)"
check "ls --summary: the extension escaped" grep -q -F 't\x1b[2jxt' sum.out
raw "ls --summary" sum.out sum.err
"$WDS" ls --json keys.tar >lsj.out
check "ls --json: the key exactly, by JSON" "$PYTHON3" -c '
import json, sys
k = [json.loads(l)["__key__"] for l in open(sys.argv[1], encoding="utf-8")][3]
assert k == "a\nb\tc\x1b]0;title\x07\x1b[2J\u009b\udcff", repr(k)' lsj.out

# ---- an error naming the member ----
rc=0
"$WDS" ls dup.tar >dup.out 2>dup.err || rc=$?
check "error: ls exits 1" test "$rc" = 1
check "error: the member named, escaped" grep -q -F "member \"$SHOWN.txt\"" dup.err
raw "error: ls" dup.out dup.err
"$WDS" verify dup.tar >verify.out 2>verify.err || true
check "error: verify reports it" grep -q -F "duplicate extension" verify.out
raw "error: verify" verify.out verify.err
"$WDS" batches --decode txt --batch-size 2 dup.tar >batches.out 2>batches.err || true
check "error: batches reports it" grep -q -F "duplicate extension" batches.err
raw "error: batches" batches.out batches.err

# ---- wds-train's source line ----
"$WDS" synth --shards 1 --samples 8 --size 10 plain.tar >/dev/null
cat >gen.py <<'PY'
import io, sys, tarfile
from PIL import Image
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as tf:
    for k in range(8):
        im = Image.new("L", (8, 8)); b = io.BytesIO(); im.save(b, "PNG")
        for ext, d in (("png", b.getvalue()), ("cls", str(k % 2).encode())):
            ti = tarfile.TarInfo(f"s{k:03d}.{ext}"); ti.size = len(d)
            tf.addfile(ti, io.BytesIO(d))
PY
NAME=$'img\e]0;title\a\e[2J.tar'
"$PYTHON3" gen.py "$NAME" || die "generating a PNG shard (python3 with Pillow)"
rc=0
timeout 120 "$TRAIN" --source "$NAME" --device cpu --image-size 8 --channels 1 --hidden 8 \
  --batch-size 4 --epochs 1 --seed 1 >train.out 2>train.err || rc=$?
check "wds-train: exits 0" test "$rc" = 0
check "wds-train: the source line escaped" \
  grep -q -F 'wds-train: source 0: img\x1b]0;title\x07\x1b[2J.tar (' train.out
raw "wds-train" train.out train.err

# ---- wds write's class note ----
CLS=$'c\e]0;title\a\e[2J'
mkdir -p "tree/$CLS" tree/d
printf 'x' >"tree/$CLS/a.txt"
printf 'y' >tree/d/b.txt
rc=0
"$WDS" write --labels -o w.tar tree >write.out 2>write.err || rc=$?
check "write: exits 0" test "$rc" = 0
check "write: the class note escaped" \
  grep -q -F '2 classes (c\x1b]0;title\x07\x1b[2J ... d)' write.err
raw "write" write.out write.err

echo "$passed passed, $failed failed"
((failed == 0))
