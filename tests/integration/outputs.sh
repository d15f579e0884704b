#!/usr/bin/env bash
# Tool test: outputs.
#
#   * output that cannot be written is an error: every tool (expand, ls,
#     bench, synth, batches, write, index, verify, cat, --help, and
#     wds-train's log and --json) exits 1 saying "cannot write ...: No space
#     left on device" with stdout on /dev/full;
#   * `ulimit -f` (SIGXFSZ ignored) cuts `wds ls` short: exit 1, "File too
#     large", and it stops at once: a pipe: input that would stall for 60 s
#     after its data is not waited for;
#   * a reader that goes away (`| head -1`): by SIGPIPE, quietly (status
#     141); with SIGPIPE ignored, "Broken pipe" and exit 1, at once;
#   * a FIFO as -o of `wds index` and `wds write`, and as wds-train's
#     --checkpoint, is written in place (read by a background cat) and stays
#     a FIFO; so does a private character device (mknod in the test's
#     directory, never /dev/null itself) for write, index, batches --save,
#     --checkpoint, and wds-train's --json and --log-rows (a FIFO too); no
#     temporary file is left;
#   * a symbolic link to a FIFO or a device is refused
#     by every output: index -o, write -o, synth, batches --save (an .npy
#     name and a __rows__.json name), wds-train --checkpoint, --json and
#     --log-rows (these two once followed the link); exit 1, a
#     message naming the link and what it points to, nothing written into
#     the FIFO, link and FIFO left; a symlink to a regular file is replaced
#     by the new file, its target untouched;
#   * `-o -`: `wds write -o -` is the same bytes as the shard file (its
#     summary on stderr), `wds index -o -` the same as stdout;
#   * `wds write` reads files to their end: a symlink to /proc/self/environ
#     (size 0 in fstat) is stored whole, from a directory and from a
#     manifest; a /sys file whose size (4096) is not what it holds is a
#     "changed size" error naming it;
#   * the benchmark scripts refuse to measure when /dev/null is not the null
#     device (checked on a regular file and a FIFO through
#     WDS_BENCH_DEVNULL, never by touching /dev/null).
#
# Usage: outputs.sh WDS_BINARY WDS_TRAIN_BINARY
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup outputs "timeout mkfifo cmp" "$@"
TRAIN=${2:?usage: outputs.sh WDS_BINARY WDS_TRAIN_BINARY}
[[ $TRAIN == /* ]] || TRAIN=$OLDPWD/$TRAIN
[[ -x $TRAIN ]] || die "wds-train binary '$TRAIN' not found"
SCRIPTS=$HERE/../../scripts

# expect_fail NAME STATUS PATTERN: the last command's status (given) is 1
# and its stderr (err.txt) matches PATTERN.
expect_fail() {
  local name=$1 rc=$2 pat=$3
  if [[ $rc == 1 ]] && grep -q -- "$pat" err.txt; then
    ok "$name"
  else
    bad "$name" "exit $rc (expected 1), stderr:" "$(head -3 err.txt)"
  fi
}
# full ARGS...: wds ARGS with stdout on /dev/full.
full() {
  local rc=0
  timeout 60 "$WDS" "$@" >/dev/full 2>err.txt || rc=$?
  expect_fail "/dev/full: wds $*" "$rc" "No space left on device"
}
# still NAME TEST PATH: ok when `test TEST PATH` holds (the file type).
still() {
  if test "$2" "$3"; then ok "$1"; else bad "$1" "$(ls -l "$3" 2>&1)"; fi
}
# no_temporaries NAME DIR: no *.tmp* file is left in DIR.
no_temporaries() {
  local left
  left=$(find "$2" -maxdepth 1 -name '*.tmp*' | head -3)
  if [[ -z $left ]]; then ok "$1"; else bad "$1" "left: $left"; fi
}

# ---- fixtures ----
"$WDS" synth --shards 1 --samples 2000 --size 64 big.tar >/dev/null
"$WDS" synth --shards 1 --samples 20 --size 64 small.tar >/dev/null
mkdir tree
printf 'hello' >tree/a.txt
printf '3' >tree/a.cls
printf 'world' >tree/b.txt
cat >gen.py <<'PY'
import io, random, sys, tarfile
from PIL import Image
rng = random.Random(1)
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as tf:
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    pad = "k" * int(sys.argv[3]) if len(sys.argv) > 3 else ""
    for k in range(n):
        c = rng.randrange(10)
        im = Image.new("L", (8, 8)); im.putdata([rng.randrange(256) for _ in range(64)])
        b = io.BytesIO(); im.save(b, "PNG")
        for ext, d in (("png", b.getvalue()), ("cls", str(c).encode())):
            ti = tarfile.TarInfo(f"{pad}s{k:03d}.{ext}"); ti.size = len(d); ti.mtime = 0
            tf.addfile(ti, io.BytesIO(d))
PY
"$PYTHON3" gen.py img.tar || die "generating PNG shards (python3 with Pillow)"
TRAIN_ARGS=(--train img.tar --device cpu --image-size 8 --channels 1 --hidden 8
  --batch-size 8 --epochs 1 --seed 1)

# ---- write errors ----
full expand 'x-{0..9}.tar'
full ls big.tar
full ls --json small.tar
full ls --summary small.tar
full bench small.tar
full bench --decode bin --batch-size 4 small.tar
full synth synth-out.tar
full batches small.tar --decode bin --batch-size 4
full write -o w-%d.tar tree
full write -o - tree
full index small.tar
full index small.tar -o -
full verify small.tar
full verify --json small.tar
full cat small.tar
for cmd in expand ls bench synth batches write index verify cat; do
  full "$cmd" --help
done
rc=0
timeout 60 "$TRAIN" "${TRAIN_ARGS[@]}" >/dev/full 2>err.txt || rc=$?
expect_fail "/dev/full: wds-train log" "$rc" "cannot write the output: No space left on device"
rc=0
timeout 60 "$TRAIN" "${TRAIN_ARGS[@]}" --json /dev/full >/dev/null 2>err.txt || rc=$?
expect_fail "/dev/full: wds-train --json" "$rc" "No space left on device"
rc=0
timeout 60 "$TRAIN" --help >/dev/full 2>err.txt || rc=$?
expect_fail "/dev/full: wds-train --help" "$rc" "No space left on device"

# A file size limit: the listing (about 60 KB) is cut at 10 KiB. The input
# stalls for 60 s after its data, so only a tool that stops at the failed
# write ends in time.
rc=0
(
  trap '' XFSZ
  ulimit -f 10
  exec timeout 30 "$WDS" ls 'pipe:cat big.tar; sleep 60' >limited.txt 2>err.txt
) || rc=$?
expect_fail "ulimit -f: wds ls exits 1 at once" "$rc" "cannot write the output: File too large"
size=$(stat -c %s limited.txt)
if ((size <= 10240)); then ok "ulimit -f: output within the limit"; else bad "ulimit -f: output within the limit" "$size bytes"; fi

# A reader that goes away: SIGPIPE at its default ends wds quietly (141);
# ignored (inherited), EPIPE is a write error (exit 1) that stops it at once.
# (A SIGPIPE ignored when this script started cannot be reset by bash.)
set +o pipefail
sigign=$(awk '/^SigIgn:/ {print $2}' /proc/$$/status)
if (((0x$sigign >> 12) & 1)); then
  echo "# skipped the default-SIGPIPE check: SIGPIPE is ignored by our parent"
else
  status=$(
    timeout 30 "$WDS" ls 'pipe:cat big.tar; sleep 60' 2>err.txt | head -1 >/dev/null
    echo "${PIPESTATUS[0]}"
  )
  if [[ $status == 141 && ! -s err.txt ]]; then
    ok "| head -1: SIGPIPE, quietly"
  else
    bad "| head -1: SIGPIPE, quietly" "status $status, stderr: $(head -2 err.txt)"
  fi
fi
status=$(
  trap '' PIPE
  timeout 30 "$WDS" ls 'pipe:cat big.tar; sleep 60' 2>err.txt | head -1 >/dev/null
  echo "${PIPESTATUS[0]}"
)
set -o pipefail
expect_fail "| head -1, SIGPIPE ignored: exit 1 at once" "$status" "cannot write the output: Broken pipe"

# ---- special files are written in place ----
mkdir fifo
mkfifo fifo/index.json fifo/shard.tar fifo/ck
timeout 30 cat fifo/index.json >got-index.json &
reader=$!
rc=0
timeout 30 "$WDS" index small.tar -o fifo/index.json 2>err.txt || rc=$?
wait "$reader" || true
check "FIFO: wds index -o FIFO exits 0" test "$rc" = 0
still "FIFO: wds index leaves a FIFO" -p fifo/index.json
check "FIFO: the reader got the index" grep -q '"nsamples": 20' got-index.json
timeout 30 cat fifo/shard.tar >got-shard.tar &
reader=$!
rc=0
timeout 30 "$WDS" write -o fifo/shard.tar tree >/dev/null 2>err.txt || rc=$?
wait "$reader" || true
check "FIFO: wds write -o FIFO exits 0" test "$rc" = 0
still "FIFO: wds write leaves a FIFO" -p fifo/shard.tar
printf 'a\tcls 1\ttxt 5\nb\ttxt 5\n' >expect-tree.txt
"$WDS" ls got-shard.tar >got-tree.txt 2>&1 || true
check "FIFO: the reader got the shard" cmp -s expect-tree.txt got-tree.txt
timeout 60 cat fifo/ck >got-ck &
reader=$!
rc=0
timeout 60 "$TRAIN" "${TRAIN_ARGS[@]}" --checkpoint fifo/ck >/dev/null 2>err.txt || rc=$?
wait "$reader" || true
check "FIFO: wds-train --checkpoint FIFO exits 0" test "$rc" = 0
still "FIFO: the checkpoint FIFO stays a FIFO" -p fifo/ck
check "FIFO: the reader got the checkpoint" test "$(head -c 8 got-ck)" = WDSTRAIN
mkfifo fifo/train.json fifo/train.rows
timeout 60 cat fifo/train.json >got-train.json &
reader=$!
timeout 60 cat fifo/train.rows >got-train.rows &
reader2=$!
rc=0
timeout 60 "$TRAIN" "${TRAIN_ARGS[@]}" --json fifo/train.json --log-rows fifo/train.rows \
  >/dev/null 2>err.txt || rc=$?
wait "$reader" "$reader2" || true
check "FIFO: wds-train --json FIFO --log-rows FIFO exits 0" test "$rc" = 0
still "FIFO: the --json FIFO stays a FIFO" -p fifo/train.json
still "FIFO: the --log-rows FIFO stays a FIFO" -p fifo/train.rows
check "FIFO: the reader got the JSON summary" grep -q '"summary"' got-train.json
check "FIFO: the reader got the rows" test "$(wc -l <got-train.rows)" = 40
no_temporaries "FIFO: no temporary file" fifo

# A private null device (never /dev/null itself: a failing run would
# replace it for the whole machine).
mkdir dev
if mknod -m 666 dev/null c 1 3 2>/dev/null && echo probe >dev/null 2>/dev/null; then
  ln -s null dev/link
  mkdir dev/save
  mknod -m 666 dev/save/e0-b000000.bin.npy c 1 3
  "$WDS" write -o dev/null tree >/dev/null 2>err.txt || bad "device: wds write" "$(head -2 err.txt)"
  "$WDS" index small.tar -o dev/null 2>err.txt || bad "device: wds index" "$(head -2 err.txt)"
  "$WDS" batches small.tar --decode bin --batch-size 4 --save dev/save >/dev/null 2>err.txt ||
    bad "device: wds batches --save" "$(head -2 err.txt)"
  timeout 60 "$TRAIN" "${TRAIN_ARGS[@]}" --checkpoint dev/null >/dev/null 2>err.txt ||
    bad "device: wds-train --checkpoint" "$(head -2 err.txt)"
  timeout 60 "$TRAIN" "${TRAIN_ARGS[@]}" --json dev/null --log-rows dev/null >/dev/null 2>err.txt ||
    bad "device: wds-train --json, --log-rows" "$(head -2 err.txt)"
  # through a symlink: refused
  rc=0
  "$WDS" synth dev/link >/dev/null 2>err.txt || rc=$?
  expect_fail "device: wds synth LINK-TO-DEVICE refused" "$rc" "dev/link: it is a symbolic link to a character device"
  rc=0
  timeout 60 "$TRAIN" "${TRAIN_ARGS[@]}" --checkpoint dev/link >/dev/null 2>err.txt || rc=$?
  expect_fail "device: wds-train --checkpoint LINK-TO-DEVICE refused" "$rc" \
    "dev/link: it is a symbolic link to a character device"
  rc=0
  timeout 60 "$TRAIN" "${TRAIN_ARGS[@]}" --json dev/link >/dev/null 2>err.txt || rc=$?
  expect_fail "device: wds-train --json LINK-TO-DEVICE refused" "$rc" \
    "dev/link: it is a symbolic link to a character device"
  still "device: still a character device" -c dev/null
  still "device: the link still a link" -L dev/link
  still "device: the .npy name still a character device" -c dev/save/e0-b000000.bin.npy
  no_temporaries "device: no temporary file" dev
  no_temporaries "device: no temporary .npy file" dev/save
else
  echo "# skipped the character-device checks: mknod or writing a device node fails here"
fi
rm -rf dev

# ---- symbolic links to special files are refused ----
# Each output is a link to a FIFO whose reader runs in the background:
# written through the link (as before the fix), the reader gets the bytes.
mkdir links links/save
mkfifo links/fifo
# refused NAME FILE-FOR-THE-LINK CMD...: CMD with FILE a symlink to the FIFO
# exits 1 naming the link, writes nothing into the FIFO, leaves both.
refused() {
  local name=$1 link=$2 rc=0
  shift 2
  ln -sfn "$PWD/links/fifo" "$link"
  timeout 30 cat links/fifo >links/got &
  local reader=$!
  timeout 60 "$@" >/dev/null 2>err.txt || rc=$?
  # release the reader if nothing opened the FIFO for writing
  timeout 5 bash -c ': >links/fifo' 2>/dev/null || true
  wait "$reader" || true
  expect_fail "link to a FIFO: $name refused" "$rc" "$link: it is a symbolic link to a FIFO"
  check "link to a FIFO: $name wrote nothing into it" test ! -s links/got
  still "link to a FIFO: $name left the link" -L "$link"
  still "link to a FIFO: $name left the FIFO" -p links/fifo
  rm -f "$link"
}
refused "wds index -o" links/index.json "$WDS" index small.tar -o links/index.json
refused "wds write -o" links/shard.tar "$WDS" write -o links/shard.tar tree
refused "wds synth" links/synth.tar "$WDS" synth links/synth.tar
refused "wds batches --save (.npy)" links/save/e0-b000000.bin.npy \
  "$WDS" batches small.tar --decode bin --batch-size 4 --save links/save
refused "wds batches --save (__rows__.json)" links/save/e0-b000000.__rows__.json \
  "$WDS" batches small.tar --decode bin --batch-size 4 --save links/save
refused "wds-train --checkpoint" links/ck "$TRAIN" "${TRAIN_ARGS[@]}" --checkpoint links/ck
refused "wds-train --json" links/train.json "$TRAIN" "${TRAIN_ARGS[@]}" --json links/train.json
refused "wds-train --log-rows" links/train.rows "$TRAIN" "${TRAIN_ARGS[@]}" --log-rows links/train.rows
no_temporaries "link to a FIFO: no temporary file" links
no_temporaries "link to a FIFO: no temporary file (--save)" links/save
# A symlink to a regular file is replaced by the new file (the rename
# replaces the link); the file it pointed to is left as it was.
printf 'old' >links/target.json
ln -s target.json links/reg.json
"$WDS" index small.tar -o links/reg.json 2>err.txt || bad "link to a file: wds index" "$(head -2 err.txt)"
still "link to a file: replaced by a regular file" -f links/reg.json
check "link to a file: not a link any more" test ! -L links/reg.json
check "link to a file: the new index" grep -q '"nsamples": 20' links/reg.json
check "link to a file: its target untouched" test "$(cat links/target.json)" = old
printf 'old' >links/target.rows
ln -s target.json links/train-reg.json
ln -s target.rows links/train-reg.rows
timeout 60 "$TRAIN" "${TRAIN_ARGS[@]}" --json links/train-reg.json --log-rows links/train-reg.rows \
  >/dev/null 2>err.txt || bad "link to a file: wds-train --json, --log-rows" "$(head -2 err.txt)"
check "link to a file: wds-train --json replaced the link" test -f links/train-reg.json -a ! -L links/train-reg.json
check "link to a file: wds-train --log-rows replaced the link" test -f links/train-reg.rows -a ! -L links/train-reg.rows
check "link to a file: the new JSON lines" grep -q '"summary"' links/train-reg.json
check "link to a file: wds-train left the targets untouched" \
  test "$(cat links/target.json links/target.rows)" = oldold
no_temporaries "link to a file: no temporary file" links

# --json and --log-rows are logs: written as the run goes, so a
# run killed mid-way leaves what it logged (under a temporary name renamed
# at the end, a SIGKILL left no FILE at all).
"$TRAIN" "${TRAIN_ARGS[@]}" --epochs 100000 --log-every 1 --json live.jsonl \
  --log-rows live.rows >/dev/null 2>live-err.txt &
live=$!
for _ in $(seq 600); do
  grep -q '"step"' live.jsonl 2>/dev/null && test -s live.rows && break
  sleep 0.05
done
kill -9 "$live" 2>/dev/null || true
wait "$live" 2>/dev/null || true
check "log: --json written as the run goes (a step logged before a SIGKILL)" grep -q '"step"' live.jsonl
check "log: --log-rows written as the run goes" test -s live.rows
check "log: the rows are whole lines of six fields" awk 'NF != 6 && !/^$/ { exit 1 }' live.rows
# Steps of about 20 KB of rows (200 rows, 90-byte keys), more than a stdio
# buffer: each goes out in one write, so a kill never cuts a row.
"$PYTHON3" gen.py long.tar 200 90 || die "generating long-key shards"
for round in 1 2 3; do
  rm -f big.rows
  "$TRAIN" --train long.tar --device cpu --image-size 8 --channels 1 --hidden 8 \
    --batch-size 200 --epochs 100000 --seed 1 --log-rows big.rows >/dev/null 2>&1 &
  live=$!
  for _ in $(seq 600); do
    test "$(stat -c %s big.rows 2>/dev/null || echo 0)" -gt 60000 && break
    sleep 0.02
  done
  kill -9 "$live" 2>/dev/null || true
  wait "$live" 2>/dev/null || true
  check "log: 20 KB steps, killed (round $round): rows logged" test -s big.rows
  check "log: 20 KB steps, killed (round $round): whole steps of whole rows" \
    awk 'NF != 6 { exit 1 } END { exit NR % 200 != 0 }' big.rows
done
# /dev/stdout with stdout redirected to a file: the log lands in that file,
# after what was printed (was: the link replaced, or refused).
"$TRAIN" "${TRAIN_ARGS[@]}" --json /dev/stdout >stdout.txt 2>err.txt ||
  bad "--json /dev/stdout > FILE" "$(head -2 err.txt)"
check "--json /dev/stdout > FILE: the banner, then the JSON lines" \
  grep -q '"summary"' stdout.txt
check "--json /dev/stdout > FILE: the text log kept too" grep -q '^wds-train: backend' stdout.txt
check "--json /dev/stdout: /dev/stdout still a link" test -L /dev/stdout
"$TRAIN" "${TRAIN_ARGS[@]}" --log-rows /dev/fd/1 >fd1.txt 2>err.txt ||
  bad "--log-rows /dev/fd/1 > FILE" "$(head -2 err.txt)"
check "--log-rows /dev/fd/1 > FILE: the rows in the file" grep -q ' s0[0-9][0-9]$' fd1.txt

# ---- -o - ----
"$WDS" write -o file.tar tree >/dev/null
rc=0
"$WDS" write -o - tree >stream.tar 2>err.txt || rc=$?
check "-o -: wds write exits 0" test "$rc" = 0
check "-o -: the same bytes as the shard file" cmp -s file.tar stream.tar
check "-o -: the summary on stderr" grep -q '^wrote 1 shard' err.txt
rc=0
"$WDS" write -o - --maxcount 1 tree >/dev/null 2>err.txt || rc=$?
check "-o - with --maxcount: usage error" test "$rc" = 2
"$WDS" index small.tar >index-stdout.json
"$WDS" index small.tar -o - >index-dash.json
check "-o -: wds index -o - is stdout" cmp -s index-stdout.json index-dash.json

# ---- files read to their end ----
mkdir proc
printf 'x' >proc/a.txt
ln -s /proc/self/environ proc/a.env
env -i WDS_T=abc "$WDS" write -o env.tar proc >/dev/null 2>err.txt || bad "environ: wds write" "$(head -2 err.txt)"
# wds's own environment: "WDS_T=abc" and its NUL, 10 bytes.
check "environ: stored whole from a directory" grep -q $'^a\tenv 10\ttxt 1$' <("$WDS" ls env.tar)
printf '{"__key__": "m", "env": "%s/proc/a.env"}\n' "$PWD" >m.jsonl
env -i WDS_T=abc "$WDS" write -o envm.tar --manifest m.jsonl >/dev/null 2>err.txt ||
  bad "environ: wds write --manifest" "$(head -2 err.txt)"
check "environ: stored whole from a manifest" grep -q $'^m\tenv 10$' <("$WDS" ls envm.tar)
sysfile=
for f in /sys/devices/system/cpu/online /sys/kernel/mm/transparent_hugepage/enabled; do
  if [[ -r $f && $(stat -c %s "$f") == 4096 ]]; then
    sysfile=$f
    break
  fi
done
if [[ -n $sysfile ]]; then
  mkdir sys
  ln -s "$sysfile" sys/a.txt
  rc=0
  "$WDS" write -o sys.tar sys >/dev/null 2>err.txt || rc=$?
  expect_fail "sysfs: a size that is not what the file holds" "$rc" "sys/a.txt changed size while it was read"
  check "sysfs: no shard" test ! -e sys.tar
else
  echo "# skipped the sysfs check: no /sys file of 4096 bytes"
fi

# ---- the benchmark scripts check /dev/null ----
printf 'not a device' >fake-null
mkfifo fake-fifo
for s in bench-read.sh bench-zst.sh bench-write.sh bench-loader.sh bench-peers.sh bench-http.sh \
  callgrind-jpeg.sh; do
  for fake in fake-null fake-fifo; do
    rc=0
    WDS_BENCH_DEVNULL=$PWD/$fake timeout 30 bash "$SCRIPTS/$s" "$PWD/no-build" "$PWD/no-data" \
      >/dev/null 2>err.txt || rc=$?
    expect_fail "$s refuses $fake as /dev/null" "$rc" "is not the null device"
  done
done
check "bench scripts: nothing generated" test ! -e no-data

echo "$passed passed, $failed failed"
((failed == 0))
