#!/usr/bin/env bash
# Tool test: `wds write`.
#
#   * from a directory tree (nested directories, multi-dot extensions, hidden
#     files and directories, a file without an extension, a symlinked file):
#     the `wds ls` listing is the one computed here from the tree, members
#     have mode 0444, owner 0/0, mtime 0, every byte matches the files;
#   * --maxcount / --maxsize / --start / .tar.zst / .tar.gz outputs;
#   * from a manifest: file values (relative to the manifest), inline
#     strings, numbers, objects, null, --inline; a bad line exits 1 naming
#     the line, and no shard is written;
#   * from a spec: re-sharding 'a-{0..2}.tar' into 'b-%04d.tar.zst' with
#     --maxcount 7 gives the same `wds ls` listing; from stdin (`-`) too;
#   * --shuffle --seed: same seed same bytes, another seed another order,
#     the same set of samples (directory and stream inputs);
#   * a `wds write` killed (SIGKILL) while its input stalls leaves no
#     truncated shard under a final name: every final-named file reads to
#     the end; the unfinished one is a NAME.tmp-PID-N file;
#   * usage errors exit 2, input errors exit 1 with "wds write: ...";
#   * the shard-reading options (--max-urls, --retries, --read-timeout,
#     --cache-dir, --cache-size) in write, and --retries in index and
#     verify, parsed by the loader's option table.
#
# Usage: write.sh WDS_BINARY
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup write "timeout cmp zstd gzip sha256sum" "$@"

# differ NAME FILE1 FILE2: ok when the files differ.
differ() {
  if cmp -s "$2" "$3"; then bad "$1" "$2 and $3 are the same"; else ok "$1"; fi
}
# same NAME FILE1 FILE2: ok when equal, else the diff.
same() {
  if cmp -s "$2" "$3"; then ok "$1"; else bad "$1" "$(diff "$2" "$3" | head -20)"; fi
}

# ---- a directory tree ----
mkdir -p tree/a/b tree/c tree/.hidden_dir tree/z
printf 'one' >tree/a/b/s1.jpg
printf '1' >tree/a/b/s1.cls
head -c 5000 /dev/urandom >tree/a/b/s1.seg.png
printf 'two' >tree/a/s2.JPG
printf '{"x": 1}' >tree/a/s2.json
head -c 70000 /dev/urandom >tree/c/big.bin
printf 'h' >tree/.hidden.txt
printf 'h' >tree/.hidden_dir/x.txt
printf 'h' >tree/a/.dot.txt
printf 'r' >tree/README
for i in 0 1 2 3 4 5 6 7 8 9; do printf "v$i" >"tree/z/k$i.txt"; done
ln -s ../c/big.bin tree/a/link.bin

# The expected listing: key = path up to the first dot of the last component,
# extensions lower-cased as `wds ls` prints them, sorted by key then
# extension as found (byte order).
"$PYTHON3" - tree >tree.expect <<'EOF'
import os, sys
root = sys.argv[1]
files = []
for d, dirs, names in os.walk(root, followlinks=False):
    dirs[:] = [x for x in dirs if not x.startswith('.')]
    for n in names:
        if n.startswith('.') or '.' not in n:
            continue
        p = os.path.join(d, n)
        if not os.path.isfile(p):
            continue
        rel = os.path.relpath(p, root)
        k, e = n.split('.', 1)
        key = os.path.join(os.path.dirname(rel), k) if os.path.dirname(rel) else k
        files.append((key.encode(), e.encode(), os.path.getsize(p)))
files.sort()
out = {}
order = []
for k, e, s in files:
    if k not in out:
        out[k] = []
        order.append(k)
    out[k].append((e, s))
for k in order:
    print(k.decode() + ''.join('\t%s %d' % (e.decode().lower(), s) for e, s in out[k]))
EOF

"$WDS" write -o 'd-%03d.tar' tree >d.out 2>d.err
check "dir: exit 0" test $? -eq 0
"$WDS" ls d-000.tar >d.ls
same "dir: listing (keys, extensions, sizes, order)" tree.expect d.ls
check "dir: summary line" grep -q '^wrote 1 shard, 14 samples, ' d.out
check "dir: warns about the file without extension" grep -q README d.err
check "dir: quiet without a terminal (no progress)" test "$(grep -c 'MB/s' d.err)" -eq 0
"$GTAR" --numeric-owner -tvf d-000.tar >d.tv
check "dir: modes 0444, owner 0/0, mtime 0" \
  test "$(grep -vc '^-r--r--r-- 0/0 .* 1970-01-01 00:00 ' d.tv)" -eq 0
check "dir: extension written as found (s2.JPG)" grep -q ' a/s2.JPG$' d.tv
mkdir x && "$GTAR" -xf d-000.tar -C x
ok_bytes=1
while IFS= read -r f; do
  cmp -s "tree/$f" "x/$f" || ok_bytes=0
done < <("$GTAR" -tf d-000.tar)
check "dir: every byte equal to the files (symlink followed)" test $ok_bytes -eq 1
check "dir: symlinked file stored as a file" test -f x/a/link.bin -a ! -L x/a/link.bin

# Same input twice: the same bytes.
"$WDS" write -o 'd2-%03d.tar' tree >/dev/null 2>&1
same "dir: deterministic" d-000.tar d2-000.tar

# ---- splitting, start, compression ----
"$WDS" write --maxcount 5 --start 5 -o 'm-%02d.tar' tree >m.out 2>/dev/null
check "maxcount: 3 shards (5, 5, 4 samples) from 05" test -f m-05.tar -a -f m-06.tar -a -f m-07.tar -a ! -f m-08.tar
"$WDS" ls 'm-{05..07}.tar' >m.ls
same "maxcount: same listing" tree.expect m.ls
"$WDS" write --maxsize 40KB -o 's-%02d.tar' tree >/dev/null 2>&1
ok_size=1
for f in s-*.tar; do
  n=$("$WDS" ls "$f" | wc -l)
  sz=$(stat -c %s "$f")
  if ((sz > 40000 && n != 1)); then ok_size=0; fi
done
check "maxsize: no shard over 40KB (40000 bytes) unless it holds one sample" test $ok_size -eq 1
check "maxsize: split into several shards" test "$(ls s-*.tar | wc -l)" -ge 3
"$WDS" ls $(ls s-*.tar) >s.ls
same "maxsize: same listing" tree.expect s.ls
"$WDS" write --level 7 -o 'z-%02d.tar.zst' tree >/dev/null 2>&1
"$WDS" write -o 'g-%02d.tar.gz' tree >/dev/null 2>&1
zstd -dc z-00.tar.zst >z.tar && gzip -dc g-00.tar.gz >g.tar
same "zstd: decompresses to the plain shard" d-000.tar z.tar
same "gzip: decompresses to the plain shard" d-000.tar g.tar
"$WDS" ls z-00.tar.zst >z.ls
same "zstd: listing" tree.expect z.ls

# ---- a manifest ----
mkdir -p man/img
printf 'JPEGDATA' >man/img/01.jpg
printf 'OTHER' >man/img/02.jpg
cat >man/list.jsonl <<'EOF'
{"__key__": "s01", "jpg": "img/01.jpg", "cls": 3, "txt": "hello \u00e9\n"}
{"__key__": "s02", "jpg": "img/02.jpg", "cls": -1.5e3, "json": {"a": [1, "}"]}, "skip": null, "__url__": "x"}

{"__key__": "dir/s03", "txt": "missing.jpg is not here", "flag": true}
EOF
(cd / && "$WDS" write -o "$TMP/man-%02d.tar" --manifest "$TMP/man/list.jsonl") >man.out 2>man.err
check "manifest: exit 0" test $? -eq 0
mkdir mx && "$GTAR" -xf man-00.tar -C mx
check "manifest: members" test "$("$GTAR" -tf man-00.tar | tr '\n' ' ')" = \
  "s01.cls s01.jpg s01.txt s02.cls s02.jpg s02.json dir/s03.flag dir/s03.txt "
check "manifest: file value read (relative to the manifest)" cmp -s mx/s01.jpg man/img/01.jpg
check "manifest: number as its JSON text" test "$(cat mx/s01.cls)" = 3
check "manifest: number text kept" test "$(cat mx/s02.cls)" = -1.5e3
check "manifest: string unescaped to UTF-8" test "$(cat mx/s01.txt)" = "$(printf 'hello \303\251')"
check "manifest: object as its JSON text" test "$(cat mx/s02.json)" = '{"a": [1, "}"]}'
check "manifest: a string naming no file is text" test "$(cat mx/dir/s03.txt)" = "missing.jpg is not here"
check "manifest: true as text" test "$(cat mx/dir/s03.flag)" = true
(cd man && "$WDS" write -o ../mi-%02d.tar --inline --manifest - <list.jsonl) >/dev/null 2>&1
mkdir mix && "$GTAR" -xf mi-00.tar -C mix
check "manifest: --inline takes strings literally (stdin)" test "$(cat mix/s01.jpg)" = img/01.jpg
printf '{"__key__": "a", "x": "1"}\n{"__key__": "b", "x": 1,}\n' >bad.jsonl
rc=0
"$WDS" write -o 'bad-%02d.tar' --manifest bad.jsonl >/dev/null 2>bad.err || rc=$?
check "manifest: a bad line exits 1" test $rc -eq 1
check "manifest: the message names the line" grep -q 'line 2' bad.err
check "manifest: no shard written on a bad line" test -z "$(ls bad-* 2>/dev/null)"
printf '{"__key__": "a.b", "x": "1"}\n' >badkey.jsonl
rc=0
"$WDS" write -o 'bk-%02d.tar' --manifest badkey.jsonl >/dev/null 2>bk.err || rc=$?
check "manifest: a bad key exits 1 naming the line" test $rc -eq 1 -a -n "$(grep 'line 1' bk.err)"
check "manifest: nothing left after the error" test -z "$(ls bk-* 2>/dev/null)"

# ---- re-sharding a spec and stdin ----
"$WDS" synth --shards 3 --samples 10 --size 3000 --seed 5 'a-%d.tar' >/dev/null
"$WDS" write -o 'b-%04d.tar.zst' --maxcount 7 'a-{0..2}.tar' >/dev/null 2>&1
check "spec: 5 shards of <= 7" test "$(ls b-*.tar.zst | wc -l)" -eq 5
"$WDS" ls 'a-{0..2}.tar' >a.ls
"$WDS" ls 'b-{0000..0004}.tar.zst' >b.ls
same "spec: same listing after re-sharding" a.ls b.ls
"$WDS" ls --json 'a-{0..2}.tar' | sed 's/"__url__": "[^"]*", //' >a.json
"$WDS" ls --json 'b-{0000..0004}.tar.zst' | sed 's/"__url__": "[^"]*", //' >b.json
same "spec: same bytes (sha256 of every field)" a.json b.json
cat a-0.tar a-1.tar a-2.tar | "$WDS" write -o 'c-%04d.tar' --maxcount 30 - >/dev/null 2>&1
"$WDS" ls c-0000.tar >c.ls
# Concatenated tars: the reader stops at the first end-of-archive, as tar
# does; so stdin here is a-0.tar's samples.
"$WDS" ls a-0.tar >a0.ls
same "stdin: samples of the stream" a0.ls c.ls
"$WDS" cat 'a-{0..2}.tar' >cat.tar 2>/dev/null &&
  { "$WDS" write -o 'cc-%04d.tar' - <cat.tar >/dev/null 2>&1; "$WDS" ls 'cc-0000.tar' >cc.ls; same "stdin: wds cat | wds write" a.ls cc.ls; } ||
  echo "# wds cat not available: skipped the cat | write check"

# ---- shuffle ----
"$WDS" write --shuffle --seed 1 -o 'sh1-%02d.tar' tree >/dev/null 2>&1
"$WDS" write --shuffle --seed 1 -o 'sh1b-%02d.tar' tree >/dev/null 2>&1
"$WDS" write --shuffle --seed 2 -o 'sh2-%02d.tar' tree >/dev/null 2>&1
same "shuffle: same seed, same bytes (dir)" sh1-00.tar sh1b-00.tar
"$WDS" ls sh1-00.tar >sh1.ls
"$WDS" ls sh2-00.tar >sh2.ls
differ "shuffle: another seed, another order" sh1.ls sh2.ls
differ "shuffle: not the sorted order" sh1.ls tree.expect
sort sh1.ls >sh1.sorted
sort tree.expect >tree.sorted
same "shuffle: same samples" tree.sorted sh1.sorted
"$WDS" write --shuffle --seed 3 --shuffle-buffer 5 -o 'st1-%02d.tar' 'a-{0..2}.tar' >/dev/null 2>&1
"$WDS" write --shuffle --seed 3 --shuffle-buffer 5 -o 'st2-%02d.tar' 'a-{0..2}.tar' >/dev/null 2>&1
same "shuffle: stream, same seed same bytes" st1-00.tar st2-00.tar
"$WDS" ls st1-00.tar >st1.ls
differ "shuffle: stream order changed" st1.ls a.ls
sort st1.ls >st1.sorted
sort a.ls >a.sorted
same "shuffle: stream, same samples" a.sorted st1.sorted

# ---- killed mid-run ----
"$WDS" synth --shards 1 --samples 60 --size 200000 --seed 9 'big-%d.tar' >/dev/null
mkdir kill && mkfifo kill/in
"$WDS" write -o 'kill/k-%03d.tar' --maxcount 10 - <kill/in >/dev/null 2>&1 &
wpid=$!
# 9 MB of the 12 MB: four shards complete, the fifth stalls half written.
head -c 9000000 big-0.tar >kill/stalled
{ cat kill/stalled; exec sleep 60; } >kill/in &
fpid=$!
for _ in $(seq 100); do
  [[ -n $(ls kill/k-003.tar 2>/dev/null) ]] && break
  sleep 0.1
done
sleep 0.5
kill -9 $wpid 2>/dev/null
wait $wpid 2>/dev/null || true
kill $fpid 2>/dev/null || true
wait $fpid 2>/dev/null || true
final=$(ls kill | grep '^k-' | grep -v '\.tmp-' || true)
tmps=$(ls kill | grep '\.tmp-' || true)
check "kill: completed shards under final names" test "$(echo "$final" | wc -w)" -ge 3
ok_final=1
for f in $final; do
  "$WDS" ls "kill/$f" >/dev/null 2>&1 || ok_final=0
  "$GTAR" -tf "kill/$f" >/dev/null 2>&1 || ok_final=0
  [[ $("$WDS" ls "kill/$f" | wc -l) -eq 10 ]] || ok_final=0
done
check "kill: every final-named shard reads completely (10 samples)" test $ok_final -eq 1
check "kill: the unfinished shard is a NAME.tmp-PID-N file" \
  grep -Eq '^k-[0-9]{3}\.tar\.tmp-[0-9]+-[0-9]+$' <<<"$tmps"

# ---- errors ----
rc=0; "$WDS" write -o 'x-{0..3}.tar' tree >/dev/null 2>&1 || rc=$?
check "usage: braces in -o exit 2" test $rc -eq 2
rc=0; "$WDS" write -o 'x-%s.tar' tree >/dev/null 2>e.err || rc=$?
check "usage: bad pattern exits 2" test $rc -eq 2
rc=0; "$WDS" write --maxcount 0 tree >/dev/null 2>&1 || rc=$?
check "usage: --maxcount 0 exits 2" test $rc -eq 2
rc=0; "$WDS" write --maxsize 3X tree >/dev/null 2>&1 || rc=$?
check "usage: bad --maxsize exits 2" test $rc -eq 2
rc=0; "$WDS" write >/dev/null 2>&1 || rc=$?
check "usage: no input exits 2" test $rc -eq 2
rc=0; "$WDS" write -o 'n-%d.tar' no-such-shard.tar >/dev/null 2>n.err || rc=$?
check "input: a missing shard exits 1" test $rc -eq 1
check "input: message starts with 'wds write: '" grep -q '^wds write: .*no-such-shard' n.err
check "input: no shard left" test -z "$(ls n-* 2>/dev/null)"
rc=0; "$WDS" write -o 'nodir/x-%d.tar' tree >/dev/null 2>nd.err || rc=$?
check "output: an unwritable place exits 1 naming it" test $rc -eq 1 -a -n "$(grep nodir nd.err)"
# A pipe: target is a command, which the writer does not run: refused, and
# no file named after it is made (webdataset would run it).
for target in 'pipe:cat > piped-%d.tar' ' PIPE:cat > piped-%d.tar'; do
  rc=0; "$WDS" write -o "$target" tree >/dev/null 2>p.err || rc=$?
  check "output: -o '$target' refused" test $rc -ne 0 -a -n "$(grep 'a pipe: target is a command' p.err)"
  check "output: -o '$target' makes no file" test -z "$(ls | grep -i 'pipe:\|piped')"
done

# ---- one writer per pattern; shards an earlier run left ----
# A writer that holds the pattern: its tar stream on stdin stops inside
# the second sample (two members of 1 KiB, no end blocks) until the FIFO's
# other end closes, so its first sample is written and the lock taken. A
# second `wds write` of the same pattern (another width) is refused (exit
# 1) naming the first one's pid, and writes nothing; the first then
# finishes alone.
mkdir lk
"$WDS" write -o 'd3-%03d.tar' --maxcount 1 tree >/dev/null 2>&1
printf x >lk-a.bin
printf y >lk-b.bin
"$GTAR" -cf two.tar lk-a.bin lk-b.bin
head -c 2048 two.tar >one.tar
mkfifo lk.fifo
"$WDS" write -o 'lk/s-%03d.tar' --maxcount 1 - <lk.fifo >lk1.out 2>lk1.err &
lk_pid=$!
exec 7>lk.fifo
cat one.tar >&7
for _ in $(seq 100); do [[ -e lk/.s-%d.tar.lock ]] && break; sleep 0.1; done
rc=0; "$WDS" write -o 'lk/s-%05d.tar' --maxcount 1 d3-000.tar >lk2.out 2>lk2.err || rc=$?
check "lock: a second writer of the pattern exits 1" test $rc -eq 1
check "lock: it names the other writer's pid" grep -q "another writer (pid $lk_pid)" lk2.err
check "lock: it names the lock file" grep -qF 'lk/.s-%d.tar.lock' lk2.err
tail -c +2049 two.tar >&7 # the rest: end blocks
exec 7>&-
rc=0; wait $lk_pid || rc=$?
check "lock: the first writer finishes (exit 0)" test $rc -eq 0
check "lock: only its shards are there, the lock gone" \
  test "$(cd lk && ls -A | tr '\n' ' ')" = "s-000.tar s-001.tar "

# Five shards, then two with the same pattern: the three the first run
# wrote after the second's last are named in a warning (not deleted).
"$WDS" write -o 'lo-%03d.tar' --maxcount 3 tree >/dev/null 2>lo1.err
n_lo=$(ls lo-*.tar | wc -l)
"$WDS" write -o 'lo-%03d.tar' --maxcount 3 d3-000.tar d3-001.tar d3-002.tar \
  d3-003.tar d3-004.tar d3-005.tar >lo2.out 2>lo2.err
check "leftover: the first run wrote more than two shards" test "$n_lo" -gt 2
check "leftover: the second run wrote two" grep -q '^wrote 2 shards' lo2.out
last_lo=$(printf 'lo-%03d.tar' $((n_lo - 1)))
if ((n_lo == 3)); then
  has "leftover: the warning names the one left" lo2.err "lo-002.tar, a shard of this pattern after the last one written, is left"
else
  has "leftover: the warning counts and names those left" lo2.err "$((n_lo - 2)) shards of this pattern after the last one written are left from an earlier run, lo-002.tar to $last_lo"
fi
check "leftover: they are kept" test -e "$last_lo"
check "leftover: no warning without leftovers" test "$(grep -c 'left from an earlier run' lo1.err)" -eq 0

# ---- the shard-reading options every reader command takes ----
# --max-urls, --retries, --read-timeout, the cache: one parser (the
# loader's option table), one message naming the flag.
w mu_over write --max-urls 2 -o 'mu-%d.tar' 'a-{0..2}.tar'
check "--max-urls: write refuses a spec over it (exit 1)" test "$RC" -eq 1
has "--max-urls: the message says so" mu_over.err "would make 3 URLs, over the limit of 2"
check "--max-urls: nothing written" test ! -e mu-0.tar
w mu_ok write --max-urls 3 --retries 3 --read-timeout 2.5 -o 'mu-%d.tar' 'a-{0..2}.tar'
check "--max-urls 3 --retries 3 --read-timeout 2.5: written (exit 0)" test "$RC" -eq 0
w mu_cache write --cache-dir cachew --cache-size 1M -o 'mc-%d.tar' 'a-{0..2}.tar'
check "--cache-dir, --cache-size: taken (local shards are not cached)" test "$RC" -eq 0
w mu_nodir write --cache-size 1M -o 'mc-%d.tar' 'a-{0..2}.tar'
check "--cache-size without --cache-dir: a usage error" test "$RC" -eq 2
has "--cache-size without --cache-dir: says so" mu_nodir.err "--cache-size needs --cache-dir DIR"
for cmd in write index verify; do
  out=()
  [[ $cmd == write ]] && out=(-o 'rt-%d.tar')
  w "rt_$cmd" "$cmd" "${out[@]}" --retries 3 a-0.tar
  check "wds $cmd --retries 3: taken (exit 0)" test "$RC" -eq 0
  w "rtbad_$cmd" "$cmd" "${out[@]}" --retries x a-0.tar
  check "wds $cmd --retries x: a usage error (exit 2)" test "$RC" -eq 2
  has "wds $cmd --retries x: the message names the flag" "rtbad_$cmd.err" \
    "wds $cmd: --retries needs a count from 0 to 1000, not \"x\""
  w "rto_$cmd" "$cmd" "${out[@]}" --read-timeout -1 a-0.tar
  has "wds $cmd --read-timeout -1: the loader's message" "rto_$cmd.err" \
    "--read-timeout needs seconds (0 = wait forever, at most 24 days)"
done

echo "$passed passed, $failed failed"
((failed == 0))
