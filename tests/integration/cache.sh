#!/usr/bin/env bash
# Tool test: the local shard cache (--cache-dir, --cache-size).
#
# Debian's nginx on a loopback port (scripts/lib-nginx.sh, as in http.sh)
# serves a shard set, and tests/integration/http_proxy.py cuts transfers:
#   * a first `wds ls --cache-dir` fills the cache with entries byte-equal to
#     the shards; a second reads no byte from the server (nginx's log stays
#     empty) and lists the same; so does `wds batches --mode exact --epochs
#     2` (one request per shard in all); with nginx stopped at the end, `wds
#     ls` and `wds batches` still equal the local runs;
#   * a transfer cut with --retries 0 fails and leaves nothing in the cache;
#     cut and resumed (retries), the entry is byte-equal to the shard; a
#     reader that stops early (`wds cat --limit 1`) leaves nothing; `wds
#     index`, `verify` and `write` take --retries (0: a cut fails), and
#     `wds write --cache-dir` fills the cache;
#   * --cache-size: the least recently used entry is evicted (a hit counts
#     as a use), a shard larger than the limit is not kept;
#   * three processes filling one cache at once all succeed, with whole
#     entries and no temporary file left;
#   * a cache that cannot be written (below a regular file; a read-only
#     directory when not root) does not fail the read: ls, verify, index and
#     batches succeed as without it, and each notes it once on stderr;
#   * `wds bench` reads the cache too, also with deferred reads from an
#     entry opened twice in one run (each hit touches its mtime);
#   * a stale temporary file of a dead writer is deleted; local shards and
#     pipe: are never cached.
# Skips (77) when nginx is not installed or wds was built without libcurl.
#
# Usage: cache.sh WDS_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup cache "timeout curl cmp" "$1"

unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY WDS_CACHE_DIR
source "$HERE/../../scripts/lib-nginx.sh"
if ! nginx_find; then
  echo "SKIP: nginx is not installed (apt-get install nginx)"
  exit 77
fi
probe=$("$WDS" ls http://127.0.0.1:1/x.tar 2>&1 || true)
if [[ $probe == *"built without libcurl"* ]]; then
  echo "SKIP: wds was built without libcurl (apt-get install libcurl4-openssl-dev)"
  exit 77
fi

pids=()
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  nginx_stop
  wds_test_cleanup
}
trap stop_all EXIT

mkdir www
"$WDS" synth --shards 4 --samples 40 --size 3000 www/s-%02d.tar >/dev/null
"$WDS" synth --shards 2 --samples 30 --size 70000 --seed 3 www/z-%d.tar.zst >/dev/null
"$WDS" synth --shards 1 --samples 6 --size 1M --seed 5 www/big-%d.tar >/dev/null
NAMES=(s-{00..03}.tar z-{0..1}.tar.zst big-0.tar)
LOCAL=()
for n in "${NAMES[@]}"; do LOCAL+=("www/$n"); done

# nginx (scripts/lib-nginx.sh), its access log one line per request
nginx_start "$TMP" "$TMP/www" --log || die "nginx did not start"
PORT=$NGINX_PORT
BASE=http://127.0.0.1:$PORT

# proxy MODE [SEED]: starts http_proxy.py; its port in PPORT.
proxy() {
  local f=proxy-$1-${2:-0}.port i
  "$PYTHON3" "$HERE/http_proxy.py" "$1" "$PORT" "$f" "${2:-1}" &
  pids+=($!)
  for ((i = 0; i < 100; i++)); do
    [[ -s $f ]] && break
    sleep 0.05
  done
  [[ -s $f ]] || die "http_proxy.py $1 did not start"
  PPORT=$(cat "$f")
}
URLS=()
for n in "${NAMES[@]}"; do URLS+=("$BASE/$n"); done

# entry DIR NAME: the cache entry of shard NAME (one file ending in -NAME).
entry() {
  local f
  for f in "$1"/*-"$2"; do [[ -e $f ]] && echo "$f"; done
}
# entries DIR: how many entries (files not starting with '.').
entries() { find "$1" -maxdepth 1 -type f ! -name '.*' | wc -l; }
# temps DIR: temporary files left.
temps() { find "$1" -maxdepth 1 -name '.tmp-*' | wc -l; }
# whole DIR NAME...: every shard NAME has an entry byte-equal to it.
whole() {
  local d=$1 n e
  shift
  for n in "$@"; do
    e=$(entry "$d" "$n")
    [[ -n $e ]] && cmp -s "$e" "www/$n" || return 1
  done
}
# requests: the access log's lines, once nginx has logged what it served
# (it logs a request after its response went out); log_reset empties it.
requests() {
  nginx_log_settle access.log
  wc -l <access.log
}
log_reset() {
  nginx_log_settle access.log
  : >access.log
}

"$WDS" ls "${LOCAL[@]}" >local.ls
[[ -s local.ls ]] || die "empty local listing"
same() { # same NAME FILE [REF]: FILE equals REF (local.ls)
  local ref=${3:-local.ls}
  if cmp -s "$ref" "$2"; then ok "$1"; else bad "$1" "differs from $ref:" "$(diff "$ref" "$2" | head -5)"; fi
}

# -- epoch 1 fills, epoch 2 reads nothing from the server --
log_reset
w ls1 ls --cache-dir c1 "${URLS[@]}"
expect_rc ls_fill_exit 0 ls1
same ls_fill_equals_local ls1.out
if [[ $(entries c1) == "${#NAMES[@]}" ]] && whole c1 "${NAMES[@]}" && [[ $(temps c1) == 0 ]]; then
  ok cache_entries_byte_equal_to_shards
else
  bad cache_entries_byte_equal_to_shards "$(ls -la c1)"
fi
log_reset
w ls2 ls --cache-dir c1 "${URLS[@]}"
expect_rc ls_cached_exit 0 ls2
same ls_cached_equals_local ls2.out
if [[ $(requests) == 0 ]]; then ok second_epoch_reads_nothing_from_server; else bad second_epoch_reads_nothing_from_server "$(cat access.log)"; fi
if [[ ! -s ls1.err && ! -s ls2.err ]]; then ok nothing_printed; else bad nothing_printed "$(cat ls1.err ls2.err)"; fi
# WDS_CACHE_DIR is the default of --cache-dir
log_reset
RC=0
WDS_CACHE_DIR=c1 timeout 60 "$WDS" ls "${URLS[@]}" >env.out 2>env.err || RC=$?
if [[ $RC == 0 ]] && cmp -s local.ls env.out && [[ $(requests) == 0 ]]; then
  ok wds_cache_dir_environment
else
  bad wds_cache_dir_environment "exit $RC, $(requests) requests" "$(head -3 env.err)"
fi

# wds bench (the reader benchmark) takes the cache too
log_reset
w bench1 bench --cache-dir c9 "$BASE/s-00.tar"
w bench2 bench --cache-dir c9 "$BASE/s-00.tar"
if [[ $RC == 0 && $(requests) == 1 ]] && whole c9 s-00.tar; then ok bench_uses_the_cache; else bad bench_uses_the_cache "exit $RC, $(requests) requests" "$(head -3 bench2.err)"; fi
w bench3 bench --cache-size 1G "$BASE/s-00.tar"
expect_rc bench_cache_size_needs_dir 2 bench3

# deferred reads from a cached shard opened twice in one run (warm cache):
# each cache hit touches the entry's mtime, which must not fail the fields
# deferred from the first open (review 1, finding 1)
dbench() { w "$1" bench --decode bin --cache-dir c10 --workers 1 --batch-size 2 \
  --shuffle-buffer 100 --defer-reads on --json "$BASE/big-0.tar::$BASE/big-0.tar"; }
dbench dcache1
dbench dcache2
if [[ $RC == 0 ]] && grep -q '"batches": 6,' dcache2.out && ! grep -q '"deferred_fields": 0,' dcache2.out; then
  ok deferred_reads_from_a_cache_entry_opened_twice
else
  bad deferred_reads_from_a_cache_entry_opened_twice "exit $RC" "$(head -c 600 dcache2.out; head -3 dcache2.err)"
fi

# the loader: two epochs in one process, one request per shard in all
"$WDS" batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --epochs 2 --save save-local "${LOCAL[@]}" >local.batches
log_reset
w b1 batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --epochs 2 --cache-dir c2 --save save-http "${URLS[@]}"
npy_sum() { (cd "$1" && cat ./*.npy | md5sum); }
if [[ $RC == 0 ]] && cmp -s local.batches b1.out && [[ $(npy_sum save-local) == "$(npy_sum save-http)" ]]; then
  ok batches_cached_equal_local
else
  bad batches_cached_equal_local "exit $RC" "$(head -3 b1.err)" "$(diff local.batches b1.out | head -3)"
fi
if [[ $(requests) == "${#NAMES[@]}" ]] && whole c2 "${NAMES[@]}"; then
  ok batches_one_request_per_shard_over_two_epochs
else
  bad batches_one_request_per_shard_over_two_epochs "$(requests) requests, wanted ${#NAMES[@]}" "$(ls c2)"
fi

# -- a cut transfer is never cached --
proxy cut 7
w cut0 ls --retries 0 --cache-dir c3 "http://127.0.0.1:$PPORT/z-0.tar.zst"
expect_rc cut_without_retries_fails 1 cut0
if [[ $(entries c3) == 0 && $(temps c3) == 0 ]]; then ok cut_transfer_not_cached; else bad cut_transfer_not_cached "$(ls -la c3)"; fi
w cutr ls --cache-dir c3 "http://127.0.0.1:$PPORT/z-0.tar.zst" "http://127.0.0.1:$PPORT/big-0.tar"
cuts=$(grep -c '^cut' proxy-cut-7.port.log || true)
if [[ $RC == 0 ]] && ((cuts > 1)) && whole c3 z-0.tar.zst big-0.tar && [[ $(entries c3) == 2 ]]; then
  ok resumed_transfer_cached_whole
else
  bad resumed_transfer_cached_whole "exit $RC, $cuts cuts" "$(head -3 cutr.err)" "$(ls -la c3)"
fi
# index, verify and write take --retries too: with 0 a cut
# transfer fails the shard (exit 1), by default it resumes.
for cmd in index verify write; do
  out=()
  [[ $cmd == write ]] && out=(-o "rw-$cmd-%d.tar")
  w "cut0_$cmd" "$cmd" "${out[@]}" --retries 0 "http://127.0.0.1:$PPORT/z-0.tar.zst"
  expect_rc "${cmd}_retries_0_fails_on_a_cut" 1 "cut0_$cmd"
  w "cutd_$cmd" "$cmd" "${out[@]}" --retries 5 "http://127.0.0.1:$PPORT/z-0.tar.zst"
  expect_rc "${cmd}_retries_5_resumes" 0 "cutd_$cmd"
done
# wds write's SPEC inputs fill the cache as the other readers do
w wcache write -o 'wc-%d.tar' --cache-dir c9 "$BASE/s-00.tar"
if [[ $RC == 0 ]] && whole c9 s-00.tar; then ok write_cache_dir_fills_the_cache; else bad write_cache_dir_fills_the_cache "exit $RC" "$(head -3 wcache.err)" "$(ls -la c9 2>&1)"; fi
# a reader that stops early leaves nothing
w part cat --limit 1 --cache-dir c4 "$BASE/big-0.tar"
if [[ $RC == 0 ]] && [[ ! -d c4 || $(entries c4) == 0 && $(temps c4) == 0 ]]; then
  ok partial_read_not_cached
else
  bad partial_read_not_cached "exit $RC" "$(ls -la c4)"
fi
# ... also when a compressed shard is smaller than the stream's reading
# thread's 1 MiB ring, so the thread reads the whole transfer while the
# reader is held on its first sample: `wds cat --limit 1` blocks writing a
# 200 KB sample into a pipe read only after a pause, and stops. Five times
# each, .tar.gz and .tar.zst (an entry was kept every time before; a whole
# read of the same URL is still kept).
"$PYTHON3" - www/cz.tar <<'PY' || die "generating www/cz.tar"
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as tf:
    for i in range(8):
        d = (("sample %d line " % i) * 20000).encode()[:200000]
        for ext, b in (("txt", d), ("cls", str(i).encode())):
            ti = tarfile.TarInfo("c%03d.%s" % (i, ext))
            ti.size, ti.mtime = len(b), 1700000000
            tf.addfile(ti, io.BytesIO(b))
PY
gzip -n -c www/cz.tar >www/cz.tar.gz
zstd -q -c www/cz.tar >www/cz.tar.zst
kept=()
for n in cz.tar.gz cz.tar.zst; do
  for ((k = 0; k < 5; k++)); do
    rm -rf c4e
    WDS_READ_THREAD=1 "$WDS" cat --limit 1 --cache-dir c4e "$BASE/$n" 2>>early.err |
      (sleep 0.3; cat >/dev/null)
    [[ ! -d c4e || $(entries c4e) == 0 && $(temps c4e) == 0 ]] || kept+=("$n (run $k): $(ls c4e)")
  done
  w "early_whole_$n" ls --cache-dir c4w "$BASE/$n"
done
if ((${#kept[@]} == 0)) && whole c4w cz.tar.gz cz.tar.zst; then
  ok early_stop_ahead_of_the_reading_thread_not_cached
else
  bad early_stop_ahead_of_the_reading_thread_not_cached "${kept[@]}" "$(ls -la c4w 2>&1)" "$(head -3 early.err)"
fi

# -- eviction: least recently used first --
sz() { stat -c %s "www/$1"; }
limit=$(($(sz s-00.tar) + $(sz s-01.tar) + $(sz s-02.tar) + 100))
for n in s-00 s-01 s-02; do
  w "e$n" ls --cache-dir c5 --cache-size "$limit" "$BASE/$n.tar"
  sleep 0.05
done
w e00again ls --cache-dir c5 --cache-size "$limit" "$BASE/s-00.tar" # a hit: used now
sleep 0.05
w e03 ls --cache-dir c5 --cache-size "$limit" "$BASE/s-03.tar"
if [[ $RC == 0 && -n $(entry c5 s-00.tar) && -z $(entry c5 s-01.tar) && -n $(entry c5 s-02.tar) && -n $(entry c5 s-03.tar) ]]; then
  ok eviction_least_recently_used_first
else
  bad eviction_least_recently_used_first "$(ls -la --time-style=full-iso c5)"
fi
w ebig ls --cache-dir c5 --cache-size "$limit" "$BASE/big-0.tar"
if [[ $RC == 0 && -z $(entry c5 big-0.tar) && $(entries c5) == 3 ]]; then
  ok shard_larger_than_limit_not_kept
else
  bad shard_larger_than_limit_not_kept "exit $RC" "$(ls -la c5)"
fi
w badsize ls --cache-dir c5 --cache-size 12X "$BASE/s-00.tar"
expect_rc bad_cache_size_usage_error 2 badsize
has bad_cache_size_message badsize.err "--cache-size needs a size in bytes"
w nodir ls --cache-size 1G "$BASE/s-00.tar"
expect_rc cache_size_needs_dir 2 nodir

# -- processes sharing one cache --
ps=()
for i in 1 2 3; do
  timeout 120 "$WDS" ls --cache-dir c6 "${URLS[@]}" >"par$i.out" 2>"par$i.err" &
  ps+=($!)
done
prc=0
for p in "${ps[@]}"; do wait "$p" || prc=$?; done
if [[ $prc == 0 ]] && cmp -s local.ls par1.out && cmp -s local.ls par2.out && cmp -s local.ls par3.out &&
  whole c6 "${NAMES[@]}" && [[ $(entries c6) == "${#NAMES[@]}" && $(temps c6) == 0 ]]; then
  ok processes_fill_one_cache_at_once
else
  bad processes_fill_one_cache_at_once "exit $prc" "$(head -3 par1.err par2.err par3.err)" "$(ls -la c6)"
fi

# -- a cache that cannot be written does not fail the read --
echo x >afile
w ro1 ls --cache-dir afile/cache "${URLS[@]}"
if [[ $RC == 0 ]] && cmp -s local.ls ro1.out; then ok unwritable_cache_read_succeeds; else bad unwritable_cache_read_succeeds "exit $RC" "$(head -3 ro1.err)"; fi
if [[ $(grep -c 'note: the cache afile/cache could not be used' ro1.err) == 1 ]]; then
  ok unwritable_cache_noted_once
else
  bad unwritable_cache_noted_once "$(cat ro1.err)"
fi
for cmd in verify index; do
  w "ro$cmd" "$cmd" --cache-dir afile/cache "${URLS[@]}"
  if [[ $RC == 0 && $(grep -c "wds $cmd: note: the cache afile/cache could not be used ${#NAMES[@]} times" "ro$cmd.err") == 1 ]]; then
    ok "unwritable_cache_${cmd}_succeeds_noted_once"
  else
    bad "unwritable_cache_${cmd}_succeeds_noted_once" "exit $RC" "$(cat "ro$cmd.err")"
  fi
done
w ro2 batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --epochs 2 --cache-dir afile/cache "${URLS[@]}"
if [[ $RC == 0 ]] && cmp -s local.batches ro2.out; then ok unwritable_cache_batches_succeed; else bad unwritable_cache_batches_succeed "exit $RC" "$(head -3 ro2.err)"; fi
if [[ $(grep -c 'wds batches: note: the cache afile/cache could not be used' ro2.err) == 1 ]]; then
  ok unwritable_cache_batches_noted_once
else
  bad unwritable_cache_batches_noted_once "$(cat ro2.err)"
fi
if [[ $(id -u) != 0 ]]; then
  mkdir ro && chmod 555 ro
  w ro3 ls --cache-dir ro "${URLS[@]}"
  if [[ $RC == 0 ]] && cmp -s local.ls ro3.out && [[ $(entries ro) == 0 ]]; then ok readonly_cache_dir_read_succeeds; else bad readonly_cache_dir_read_succeeds "exit $RC" "$(head -3 ro3.err)"; fi
  chmod 755 ro
else
  echo "# skipped the read-only directory check: root ignores permissions"
fi

# -- stale temporary files; what is never cached --
mkdir -p c7
echo junk >c7/.tmp-dead.1.1
touch -d '2 hours ago' c7/.tmp-dead.1.1
w stale ls --cache-dir c7 "$BASE/s-00.tar"
if [[ $RC == 0 && ! -e c7/.tmp-dead.1.1 ]] && whole c7 s-00.tar; then ok stale_temporary_file_deleted; else bad stale_temporary_file_deleted "$(ls -la c7)"; fi
w local ls --cache-dir c8 "${LOCAL[@]}" "file://$TMP/www/s-00.tar" "pipe:cat www/s-01.tar"
if [[ $RC == 0 ]] && [[ ! -d c8 || $(entries c8) == 0 ]]; then ok local_and_pipe_not_cached; else bad local_and_pipe_not_cached "exit $RC" "$(ls -la c8)"; fi

# -- the server gone: the cache serves everything --
nginx_stop
if curl -s -o /dev/null "$BASE/s-00.tar"; then bad server_stopped "still answers"; else ok server_stopped; fi
w off ls --cache-dir c1 "${URLS[@]}"
expect_rc ls_server_stopped_exit 0 off
same ls_server_stopped_equals_local off.out
w offb batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --epochs 2 --cache-dir c2 "${URLS[@]}"
if [[ $RC == 0 ]] && cmp -s local.batches offb.out; then ok batches_server_stopped_equal_local; else bad batches_server_stopped_equal_local "exit $RC" "$(head -3 offb.err)"; fi
w offmiss ls --retries 0 --cache-dir c5 "$BASE/big-0.tar"
expect_rc uncached_shard_fails_without_server 1 offmiss

echo "$passed passed, $failed failed"
((failed == 0))
