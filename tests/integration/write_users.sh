#!/usr/bin/env bash
# Tool test: `wds write` as users meet it (issue 16), each check asserting
# the exit status and the message:
#
#   * -o NAME without %d: one file, any size; with --maxcount or --maxsize a
#     run that needs a second shard exits 1 naming the option, and no file
#     (nor temporary) is left; within the limits the one file is written;
#   * .JPEG/.jpeg/.JPG/.jpg: `verify --require jpg` (and JPG, jpeg) accepts
#     them all, `batches --decode jpg` decodes them, and wds-train's default
#     fields read them;
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

echo "$passed passed, $failed failed"
((failed == 0))
