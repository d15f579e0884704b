#!/usr/bin/env bash
# Tool test: s3:// shards and listings against moto's S3 server.
#
# Installs moto[server] and boto3 into a virtual environment cached in the
# build tree (a visible skip, exit 77, only when no package index answers),
# starts moto on a loopback port with signature checks on
# (INITIAL_NO_AUTH_ACTION_COUNT=3: tests/integration/s3_moto.py makes a user,
# its key and a policy, then uploads with that key), and checks:
#   * `wds ls` of an s3:// object, a brace spec, a glob and a prefix equal
#     the local listings; `wds cat` of a shard larger than the 1 MiB buffer
#     is byte-identical; `wds batches` in exact mode equals the local run;
#     `wds index` over s3:// equals the local index but for the URLs, and
#     `wds ls --summary --index` finds the s3:// URLs in it;
#   * listings: 1,001 keys (two ListObjectsV2 pages, continuation token seen
#     in moto's log), a glob stays in its path component, a prefix takes
#     every shard under it (nested too) and nothing else, sorted by key;
#   * a bad secret (SignatureDoesNotMatch), a bad key id
#     (InvalidAccessKeyId), a missing key (HTTP 404, NoSuchKey) or bucket
#     (NoSuchBucket), a glob matching nothing, missing credentials: exit 1
#     and a message naming the cause and the s3:// URL, never the secret,
#     and a 403 not retried;
#   * transfers cut at random offsets by tests/integration/http_proxy.py
#     between wds and moto: listings equal, a large shard byte-identical
#     (each retry signed anew, resumed with Range);
#   * a misbehaving endpoint (tests/integration/s3_fake.py): a listing that
#     is not XML, an <Error> document, truncated without a new token, an
#     empty page, an HTML 403: each a clear error naming the pattern;
#   * a stalled listing ends after --read-timeout (ls, expand, and the
#     loader's own listing in batches) with the exact message, and at once
#     on SIGTERM to `wds index` (exit 143); a 503-then-OK listing fails
#     with --retries 0 (one request) and succeeds by default (two);
#   * a listing past --max-urls is refused; --cache-dir keeps s3:// shards,
#     read again with the endpoint unreachable;
#   * temporary credentials (AWS_SESSION_TOKEN) from moto's STS;
#     AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL;
#   * Python: wds.Loader over an s3:// glob equals the local run, and a
#     missing key raises wds.Error naming NoSuchKey (plain builds with the
#     extension: WDS_S3_PYTHONPATH).
# Skips (77) when wds was built without libcurl or libxml2.
#
# Usage: s3.sh WDS_BINARY VENV_DIR
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup s3 "timeout" "$1"
VENV=${2:?usage: s3.sh WDS_BINARY VENV_DIR}
[[ $VENV == /* ]] || VENV=$OLDPWD/$VENV

# loopback only, and nothing of the caller's AWS set-up
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN AWS_REGION \
  AWS_DEFAULT_REGION AWS_ENDPOINT_URL AWS_ENDPOINT_URL_S3 AWS_PROFILE
probe=$("$WDS" expand 's3://b/*.tar' 2>&1 || true)
if [[ $probe == *"built without libcurl"* || $probe == *"built without libxml2"* ]]; then
  echo "SKIP: wds was built without libcurl or libxml2 (apt-get install libcurl4-openssl-dev libxml2-dev): $probe"
  exit 77
fi

fail() { die "$@"; } # for venv_ensure
source "$HERE/../lib-venv.sh"
venv_ensure_shared "$VENV" "$PYTHON3" "moto.server, boto3, flask_cors, numpy" "moto[server]" boto3 numpy

mkdir train
"$WDS" synth --shards 4 --samples 50 --size 3000 train/s-%02d.tar >/dev/null
"$WDS" synth --shards 2 --samples 30 --size 70000 --seed 3 train/z-%d.tar.zst >/dev/null
# larger than the source's 1 MiB buffer: the transfer pauses and resumes
"$WDS" synth --shards 1 --samples 6 --size 1M --seed 5 train/big-%d.tar >/dev/null
echo "not a shard" >train/readme.txt

pids=()
stop_all() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  wds_test_cleanup
}
trap stop_all EXIT

# moto on a free port (a few tries: the port is picked, then bound).
PORT=
for try in 1 2 3 4 5; do
  port=$("$PYTHON3" -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  INITIAL_NO_AUTH_ACTION_COUNT=3 "$VENV/bin/python" -m moto.server -H 127.0.0.1 -p "$port" >moto.log 2>&1 &
  pid=$!
  for i in $(seq 100); do
    if "$PYTHON3" -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null; then
      PORT=$port
      break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  if [[ -n $PORT ]]; then
    pids+=("$pid")
    break
  fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
done
[[ -n $PORT ]] || die "moto_server did not start: $(tail -5 moto.log)"
EP=http://127.0.0.1:$PORT

"$VENV/bin/python" "$HERE/s3_moto.py" "$EP" train >creds 2>setup.err ||
  die "filling moto failed: $(tail -5 setup.err)"
{
  read -r KEY SECRET
  read -r TKEY TSECRET TOKEN
} <creds
export AWS_ACCESS_KEY_ID=$KEY AWS_SECRET_ACCESS_KEY=$SECRET AWS_ENDPOINT_URL=$EP
B=s3://wds-test

same() { # same NAME WANT GOT: the files are equal
  if cmp -s "$2" "$3"; then ok "$1"; else bad "$1" "differs from $2:" "$(diff "$2" "$3" | head -5)"; fi
}
no_secret() { # no_secret NAME FILE: the secret is nowhere in FILE
  if grep -qF -- "$SECRET" "$2"; then bad "$1" "the secret is in $2"; else ok "$1"; fi
}

# -- reading --
"$WDS" ls train/s-00.tar >local1.ls
w one ls "$B/train/s-00.tar"
expect_rc ls_object_exit 0 one
same ls_object_equals_local local1.ls one.out

"$WDS" ls train/s-{00..03}.tar >locals.ls
w brace ls "$B/train/s-{00..03}.tar"
same ls_brace_equals_local locals.ls brace.out

w glob ls "$B/train/s-*.tar"
expect_rc ls_glob_exit 0 glob
same ls_glob_equals_local locals.ls glob.out

LOCAL_ALL=(train/big-0.tar train/s-{00..03}.tar train/z-{0..1}.tar.zst)
"$WDS" ls "${LOCAL_ALL[@]}" >localall.ls
w prefix ls "$B/train/"
expect_rc ls_prefix_exit 0 prefix
same ls_prefix_equals_local localall.ls prefix.out

printf '%s\n' "${LOCAL_ALL[@]/#/$B/}" >want-prefix.urls
w eprefix expand "$B/train/"
same prefix_lists_shards_only want-prefix.urls eprefix.out

"$WDS" cat train/big-0.tar >local-big.tar
w big cat "$B/train/big-0.tar"
if [[ $RC == 0 ]] && cmp -s local-big.tar big.out; then ok cat_big_identical; else bad cat_big_identical "exit $RC" "$(head -3 big.err)"; fi

npy_sum() { (cd "$1" && cat ./*.bin.npy ./*.bin.offsets.npy ./*.cls.npy ./*__valid__.npy | md5sum); }
"$WDS" batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --save save-local train/s-{00..03}.tar >local.batches
w b batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --save save-s3 "$B/train/s-*.tar"
if [[ $RC == 0 ]] && cmp -s local.batches b.out && [[ $(npy_sum save-local) == "$(npy_sum save-s3)" ]]; then
  ok batches_exact_s3_equals_local
else
  bad batches_exact_s3_equals_local "exit $RC" "$(head -3 b.err)" "$(diff local.batches b.out | head -3)"
fi

"$WDS" index -o local.idx train/s-{00..03}.tar
w idx index -o s3.idx "$B/train/s-*.tar"
same_index() { "$PYTHON3" -c 'import json, sys
a, b = (json.load(open(f))["shardlist"] for f in sys.argv[1:3])
strip = lambda l: [(s["nsamples"], s["tar_bytes"], s["samples"]) for s in l]
ok = strip(a) == strip(b) and [s["url"] for s in b] == sys.argv[3:]
sys.exit(0 if ok else 1)' local.idx s3.idx "$B"/train/s-{00..03}.tar; }
if [[ $RC == 0 ]] && same_index; then
  ok index_s3_equals_local
else
  bad index_s3_equals_local "exit $RC" "$(head -3 idx.err)"
fi
"$WDS" ls --summary train/s-{00..03}.tar >local.sum
w isum ls --summary --index s3.idx "$B/train/s-*.tar"
same index_summary_s3_equals_local local.sum isum.out

# nothing printed by the library on success
if [[ ! -s one.err && ! -s glob.err && ! -s prefix.err && ! -s b.err ]]; then
  ok nothing_printed
else
  bad nothing_printed "$(head -3 one.err glob.err prefix.err b.err)"
fi

# -- listings over more than one page --
for i in $(seq 0 1000); do printf '%s/many/t-%04d.tar\n' "$B" "$i"; done >want-many.urls
: >moto-before.log
cp moto.log moto-before.log
w many expand "$B/many/t-*.tar"
expect_rc glob_1001_exit 0 many
same glob_1001_keys_sorted want-many.urls many.out
pages=$(($(grep -c 'continuation-token=' moto.log || true) - $(grep -c 'continuation-token=' moto-before.log || true)))
if ((pages >= 1)); then ok listing_paged; else bad listing_paged "no request with a continuation token in moto's log"; fi
{
  echo "$B/many/sub/u.tar"
  cat want-many.urls
} >want-manyp.urls
w manyp expand "$B/many/"
same prefix_1001_nested_sorted want-manyp.urls manyp.out
w nested expand "$B/many/*/u.tar"
if [[ $RC == 0 && $(cat nested.out) == "$B/many/sub/u.tar" ]]; then ok glob_component; else bad glob_component "exit $RC" "$(head -3 nested.out nested.err)"; fi

w manymax expand --max-urls 1000 "$B/many/t-*.tar"
expect_rc listing_over_max_urls_exit 1 manymax
has listing_over_max_urls_message manymax.err "$B/many/t-*.tar: the listing makes more than 1000 URLs"

# -- the shard cache: s3:// shards kept, then read with the server unreachable --
w cache1 ls --cache-dir cache "$B/train/s-*.tar"
AWS_ENDPOINT_URL=http://127.0.0.1:1 w cache2 ls --cache-dir cache "$B/train/s-{00..03}.tar"
if [[ $RC == 0 ]] && cmp -s locals.ls cache1.out && cmp -s locals.ls cache2.out; then
  ok cache_serves_s3_shards
else
  bad cache_serves_s3_shards "exit $RC" "$(head -3 cache1.err cache2.err)"
fi

# -- keys with "." and ".." segments are names: fetched (and signed) as
# given, not as the path libcurl would make of them (CURLOPT_PATH_AS_IS) --
if grep -qF "'dots/a/../x.tar'" setup.err; then
  w dotdot cat "$B/dots/a/../x.tar"
  if [[ $RC == 0 ]] && cmp -s train/s-00.tar dotdot.out; then ok dot_dot_key; else bad dot_dot_key "exit $RC" "$(head -3 dotdot.err)"; fi
  w dot cat "$B/dots/./y.tar"
  if [[ $RC == 0 ]] && cmp -s train/s-00.tar dot.out; then ok dot_key; else bad dot_key "exit $RC" "$(head -3 dot.err)"; fi
else
  echo "SKIP dot_dot_key: moto did not store the key as given: $(grep 'dots keys' setup.err)"
fi

# -- errors --
cp moto.log moto-before.log
AWS_SECRET_ACCESS_KEY=wrong-secret-value w badsecret ls --retries 3 "$B/train/s-00.tar"
expect_rc bad_secret_exit 1 badsecret
has bad_secret_code badsecret.err "SignatureDoesNotMatch"
has bad_secret_status badsecret.err "HTTP 403"
has bad_secret_url badsecret.err ": $B/train/s-00.tar"
if grep -q "wrong-secret-value" badsecret.err; then bad bad_secret_not_shown "$(cat badsecret.err)"; else ok bad_secret_not_shown; fi
n403=$(($(grep -c '" 403' moto.log || true) - $(grep -c '" 403' moto-before.log || true)))
if [[ $n403 == 1 ]]; then ok forbidden_not_retried; else bad forbidden_not_retried "$n403 requests answered 403"; fi

AWS_ACCESS_KEY_ID=AKIANOSUCHKEY0000000 w badkey ls "$B/train/s-00.tar"
expect_rc bad_key_id_exit 1 badkey
has bad_key_id_code badkey.err "InvalidAccessKeyId"
no_secret bad_key_id_no_secret badkey.err

w nokey ls "$B/train/nope.tar"
expect_rc no_such_key_exit 1 nokey
has no_such_key_message nokey.err "HTTP 404"
has no_such_key_code nokey.err "NoSuchKey"
has no_such_key_url nokey.err "$B/train/nope.tar"

w nobucket ls s3://no-such-bucket/x.tar
expect_rc no_such_bucket_exit 1 nobucket
has no_such_bucket_code nobucket.err "NoSuchBucket"

AWS_SECRET_ACCESS_KEY=wrong-secret-value w badlist expand "$B/train/s-*.tar"
expect_rc listing_bad_secret_exit 1 badlist
has listing_bad_secret_code badlist.err "SignatureDoesNotMatch"
has listing_names_pattern badlist.err "$B/train/s-*.tar"

w nomatch expand "$B/train/q-*.tar"
expect_rc empty_glob_exit 1 nomatch
has empty_glob_message nomatch.err "no object matches $B/train/q-*.tar"

env -u AWS_ACCESS_KEY_ID -u AWS_SECRET_ACCESS_KEY timeout 60 "$WDS" ls "$B/train/s-00.tar" \
  >nocreds.out 2>nocreds.err && RC=0 || RC=$?
expect_rc missing_credentials_exit 1 nocreds
has missing_credentials_message nocreds.err "no AWS credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set"
env -u AWS_SECRET_ACCESS_KEY timeout 60 "$WDS" expand "$B/train/" \
  >nocreds2.out 2>nocreds2.err && RC=0 || RC=$?
expect_rc missing_secret_listing_exit 1 nocreds2
has missing_secret_listing_message nocreds2.err "AWS_SECRET_ACCESS_KEY is not set"

# -- transfers cut at random offsets (http_proxy.py cut between wds and
# moto): every retry is signed anew, the cut resumes with Range --
cutport() { # cutport SEED: starts the cutting proxy; its port in CPORT
  local f=cut-$1.port i
  "$PYTHON3" "$HERE/http_proxy.py" cut "$PORT" "$f" "$1" &
  pids+=($!)
  for ((i = 0; i < 100; i++)); do
    [[ -s $f ]] && break
    sleep 0.05
  done
  [[ -s $f ]] || die "http_proxy.py cut did not start"
  CPORT=$(cat "$f")
}
cutport 7
AWS_ENDPOINT_URL=http://127.0.0.1:$CPORT w cutls ls --retries 50 "$B/train/s-*.tar"
same cut_listing_equals_local locals.ls cutls.out
AWS_ENDPOINT_URL=http://127.0.0.1:$CPORT w cutbig cat --retries 50 "$B/train/big-0.tar"
if [[ $RC == 0 ]] && cmp -s local-big.tar cutbig.out; then ok cut_cat_big_identical; else bad cut_cat_big_identical "exit $RC" "$(head -3 cutbig.err)"; fi
ncut=$(grep -c cut "cut-7.port.log" || true)
if ((ncut >= 2)); then ok cut_transfers_were_cut; else bad cut_transfers_were_cut "$ncut cuts"; fi

# -- listing answers refused (s3_fake.py: a misbehaving endpoint) --
"$PYTHON3" "$HERE/s3_fake.py" fake.port train/s-00.tar &
pids+=($!)
for ((i = 0; i < 100; i++)); do
  [[ -s fake.port ]] && break
  sleep 0.05
done
[[ -s fake.port ]] || die "s3_fake.py did not start"
FAKE=http://127.0.0.1:$(cat fake.port)
fake() { # fake NAME BUCKET TEXT: listing s3://BUCKET/a/*.tar fails saying TEXT
  AWS_ENDPOINT_URL=$FAKE w "$1" expand --max-urls "${FAKE_MAX_URLS:-1000000}" "s3://$2/a/*.tar"
  if [[ $RC == 1 ]] && grep -qF -- "$3" "$1.err"; then ok "$1"; else bad "$1" "exit $RC, wanted 1 and '$3'" "$(head -c 600 "$1.err")"; fi
}
fake listing_not_xml notxml "not a ListObjectsV2 answer"
fake listing_error_document error "not a ListObjectsV2 answer"
fake listing_truncated_without_token notoken "truncated listing page without a new NextContinuationToken"
fake listing_same_token_again loop "truncated listing page without a new NextContinuationToken"
fake listing_empty_page page "no object matches s3://page/a/*.tar (0 listed"
fake listing_html_403 html "s3://html/a/*.tar (ListObjectsV2): HTTP 403 Forbidden"
# An endpoint that never stops paging: the URL limit ends the listing while it
# lists (3 pages of 1,000 keys for a limit of 2,500), not after every page.
FAKE_MAX_URLS=2500 fake listing_bounded_while_listing endless "s3://endless/a/*.tar: the listing makes more than 2500 URLs"

# -- a listing obeys --read-timeout, --retries and a signal as a shard read
# does (it used 300 s and 5 retries whatever the options said) --
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
STALL_MSG="s3://stall/x-*.tar (ListObjectsV2): no data for 1.0 s (the read timeout; raise it with --read-timeout or read_timeout_ms)"
t0=$(now_ms)
AWS_ENDPOINT_URL=$FAKE W_TIMEOUT=60 w stall ls --read-timeout 1 "s3://stall/x-*.tar"
dt=$(($(now_ms) - t0))
if [[ $RC == 1 && $(cat stall.err) == "wds ls: $STALL_MSG" ]] && ((dt < 10000)); then
  ok listing_read_timeout
else
  bad listing_read_timeout "exit $RC after $dt ms, wanted 1 within 10 s and 'wds ls: $STALL_MSG'" "$(head -c 600 stall.err)"
fi
t0=$(now_ms)
AWS_ENDPOINT_URL=$FAKE W_TIMEOUT=60 w stallb batches --read-timeout 1 --decode cls "s3://stall/x-*.tar"
dt=$(($(now_ms) - t0))
if [[ $RC == 1 && $(cat stallb.err) == "wds batches: $STALL_MSG" ]] && ((dt < 10000)); then
  ok loader_listing_read_timeout
else
  bad loader_listing_read_timeout "exit $RC after $dt ms, wanted 1 within 10 s and 'wds batches: $STALL_MSG'" "$(head -c 600 stallb.err)"
fi
AWS_ENDPOINT_URL=$FAKE W_TIMEOUT=60 w stalle expand --read-timeout 1 "s3://stall/x-*.tar"
if [[ $RC == 1 && $(cat stalle.err) == "wds expand: $STALL_MSG" ]]; then
  ok expand_listing_read_timeout
else
  bad expand_listing_read_timeout "exit $RC" "$(head -c 600 stalle.err)"
fi
# `wds index` defers a signal to its shard loop: the listing is cancelled
listed() { grep -c "^$1 .*list-type" fake.port.log || true; }
before=$(listed stall)
env --default-signal=INT,TERM AWS_ENDPOINT_URL="$FAKE" "$WDS" index -o stall.idx "s3://stall/x-*.tar" \
  >sig.out 2>sig.err &
spid=$!
for ((i = 0; i < 100; i++)); do
  (($(listed stall) > before)) && break
  sleep 0.05
done
sleep 0.2
t0=$(now_ms)
kill -TERM "$spid"
for ((i = 0; i < 100; i++)); do
  kill -0 "$spid" 2>/dev/null || break
  sleep 0.05
done
dt=$(($(now_ms) - t0))
kill -KILL "$spid" 2>/dev/null || true
RC=0
wait "$spid" || RC=$?
if [[ $RC == 143 && $(cat sig.err) == "wds index: interrupted by SIGTERM; nothing was read" && ! -e stall.idx ]] && ((dt < 3000)); then
  ok listing_cancelled_by_a_signal
else
  bad listing_cancelled_by_a_signal "exit $RC after $dt ms, wanted 143 at once" "$(head -c 600 sig.err)"
fi
# a 503 and then a page: no retry with --retries 0, retried by default
AWS_ENDPOINT_URL=$FAKE w flaky0 ls --retries 0 "s3://flakya/a/*.tar"
if [[ $RC == 1 && $(cat flaky0.err) == "wds ls: s3://flakya/a/*.tar (ListObjectsV2): HTTP 503 Service Unavailable" && $(listed flakya) == 1 ]]; then
  ok listing_retries_0_not_retried
else
  bad listing_retries_0_not_retried "exit $RC, $(listed flakya) listing requests" "$(head -c 600 flaky0.err)"
fi
AWS_ENDPOINT_URL=$FAKE w flakye expand --retries 0 "s3://flakyc/a/*.tar"
if [[ $RC == 1 && $(cat flakye.err) == "wds expand: s3://flakyc/a/*.tar (ListObjectsV2): HTTP 503 Service Unavailable" ]]; then
  ok expand_listing_retries_0
else
  bad expand_listing_retries_0 "exit $RC" "$(head -c 600 flakye.err)"
fi
AWS_ENDPOINT_URL=$FAKE w flakyf expand "s3://flakyc/a/*.tar" # its 2nd request
if [[ $RC == 0 && $(cat flakyf.out) == "s3://flakyc/a/k.tar" ]]; then ok expand_flaky_then_ok; else bad expand_flaky_then_ok "exit $RC" "$(head -c 600 flakyf.err)"; fi
"$WDS" ls train/s-00.tar | sed 's|train/s-00.tar|s3://flakyb/a/k.tar|' >flaky-want.ls
AWS_ENDPOINT_URL=$FAKE w flaky ls "s3://flakyb/a/*.tar"
if [[ $RC == 0 && $(listed flakyb) == 2 ]] && cmp -s flaky-want.ls flaky.out; then
  ok listing_retried_by_default
else
  bad listing_retried_by_default "exit $RC, $(listed flakyb) listing requests (want 2)" "$(head -c 600 flaky.err)"
fi

# -- temporary credentials, endpoint variables --
if [[ $TKEY != - ]]; then
  AWS_ACCESS_KEY_ID=$TKEY AWS_SECRET_ACCESS_KEY=$TSECRET AWS_SESSION_TOKEN=$TOKEN \
    w token ls "$B/train/s-00.tar"
  expect_rc session_token_exit 0 token
  same session_token_equals_local local1.ls token.out
  AWS_ACCESS_KEY_ID=$TKEY AWS_SECRET_ACCESS_KEY=$TSECRET AWS_SESSION_TOKEN=not-the-token \
    w badtoken ls "$B/train/s-00.tar"
  expect_rc session_token_wrong_exit 1 badtoken
  has session_token_wrong_message badtoken.err "InvalidToken"
  AWS_ACCESS_KEY_ID=$TKEY AWS_SECRET_ACCESS_KEY=$TSECRET AWS_SESSION_TOKEN=$TOKEN \
    w tokenlist expand "$B/train/s-*.tar"
  same session_token_listing <(printf '%s\n' "$B"/train/s-{00..03}.tar) tokenlist.out
else
  echo "# skipped session_token: moto's STS gave no temporary credentials"
fi
AWS_ENDPOINT_URL=http://127.0.0.1:1 AWS_ENDPOINT_URL_S3=$EP w epvar ls "$B/train/s-00.tar"
same endpoint_s3_variable_wins local1.ls epvar.out
AWS_ENDPOINT_URL=127.0.0.1:$PORT w epbad ls "$B/train/s-00.tar"
expect_rc endpoint_without_scheme_exit 1 epbad
has endpoint_without_scheme_message epbad.err "AWS_ENDPOINT_URL=\"127.0.0.1:$PORT\" is not an http:// or https:// URL"

# -- Python: wds.Loader over s3:// equals the local run (plain builds with
# the extension; WDS_S3_PYTHONPATH from CMake) --
PY=
if [[ -n ${WDS_S3_PYTHONPATH:-} ]]; then
  # an interpreter with numpy that loads the extension (built for CMake's)
  for py in "$VENV/bin/python" "${WDS_S3_PYTHON:-}" "$PYTHON3"; do
    if [[ -n $py ]] && PYTHONPATH=$WDS_S3_PYTHONPATH "$py" -c 'import numpy, wds' 2>/dev/null; then
      PY=$py
      break
    fi
  done
fi
if [[ -n $PY ]]; then
  PYTHONPATH=$WDS_S3_PYTHONPATH "$PY" - "$B" >py.out 2>py.err <<'PY' && RC=0 || RC=$?
import sys
import numpy as np
import wds

def run(spec):
    keys, cls = [], []
    with wds.Loader(spec, "cls", 16, rank=0, world_size=1, workers=2) as loader:
        for b in loader:
            keys += list(b.keys)
            cls.append(np.array(b["cls"]))
    return keys, np.concatenate(cls)

b = sys.argv[1]
lk, lc = run(["train/s-%02d.tar" % i for i in range(4)])
sk, sc = run(b + "/train/s-*.tar")
assert len(lk) == 200 and lk == sk and np.array_equal(lc, sc), (len(lk), len(sk))
try:
    run(b + "/train/nope.tar")
    raise SystemExit("no error for a missing key")
except wds.Error as e:
    assert "NoSuchKey" in str(e) and b + "/train/nope.tar" in str(e), str(e)
print("python ok")
PY
  if [[ $RC == 0 ]]; then ok python_loader_s3_equals_local; else bad python_loader_s3_equals_local "exit $RC" "$(tail -5 py.err)"; fi
else
  echo "# skipped the Python check: no extension in this build that an interpreter with numpy loads"
fi

echo "$passed passed, $failed failed"
((failed == 0))
