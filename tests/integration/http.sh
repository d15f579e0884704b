#!/usr/bin/env bash
# Tool test: http(s):// shards read in process with libcurl.
#
# Starts Debian's nginx on a loopback port (no root: its own config, pid,
# logs and temp paths in the test's directory) serving a generated shard set,
# and tests/integration/http_proxy.py between wds and nginx for the faults:
#   * `wds ls` over http:// equals the local listing (plain and .zst shards,
#     a redirect), and one connection serves all shards (nginx's log:
#     $connection / $connection_requests);
#   * `wds batches` in exact mode over http:// equals the local run;
#   * one shard identity: an index made over http:// serves pipe:curl and
#     pipe:wget URLs (quoted, with -sL/-fsSL/-o -, an upper-case scheme, dot
#     segments), an index made over pipe:curl records the URLs and serves
#     http://; a shard on another port is not in the index;
#   * 404, 500 and an HTML page served as a shard: the message names the
#     status (or says it is HTML) and the URL, exit status 1; 5xx is retried
#     --retries times, 404 is not;
#   * connections cut at random byte offsets (three seeds): every sample
#     delivered exactly once, listings and batches equal the local ones,
#     `wds cat` of a shard larger than the 1 MiB buffer byte-identical, the
#     server saw Range requests (206); with --retries 0 the cut is an error;
#   * the faults libcurl takes for a complete transfer, or that end with no
#     body byte (http_proxy.py accept, status, headers, nolen: a connection
#     closed at accept, after the status line, after the headers, bodies
#     without Content-Length cut anywhere): listings, exact batches and a
#     large shard byte for byte equal the local ones;
#   * a stalled server ends at --read-timeout with a message naming the URL;
#     a 503 proxy and a refused port give up after --retries, naming the URL
#     and the attempts;
#   * https:// with a self-signed certificate trusted through CURL_CA_BUNDLE
#     equals the local listing; untrusted, a clear error, not retried;
#   * pipe:curl stays available explicitly; ftp:// says to use it.
# Skips (77) when nginx is not installed or wds was built without libcurl.
#
# Usage: http.sh WDS_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup http "timeout curl" "$1"

# loopback only: no proxy from the environment (libcurl and curl honour them)
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
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
  wds_test_cleanup
}
trap stop_all EXIT

mkdir www
"$WDS" synth --shards 4 --samples 50 --size 3000 www/s-%02d.tar >/dev/null
"$WDS" synth --shards 2 --samples 30 --size 70000 --seed 3 www/z-%d.tar.zst >/dev/null
# larger than the source's 1 MiB buffer: the transfer pauses and resumes
"$WDS" synth --shards 1 --samples 6 --size 1M --seed 5 www/big-%d.tar >/dev/null
printf '<!DOCTYPE html>\n<html><head><title>Not here</title></head><body>gone</body></html>\n' >www/page.tar
LOCAL=(www/s-{00..03}.tar www/z-{0..1}.tar.zst)
NAMES=(s-{00..03}.tar z-{0..1}.tar.zst)

# A self-signed certificate for 127.0.0.1, for an https server beside the
# http one (skipped, visibly, without the openssl command).
TLS=()
if nginx_tls_cert "$TMP"; then
  TLS=(--tls "$TMP/cert.pem" "$TMP/key.pem")
else
  echo "# skipped the https checks: no openssl command (apt-get install openssl)"
fi
# nginx (scripts/lib-nginx.sh), its access log naming connections
nginx_start "$TMP" "$TMP/www" --log "${TLS[@]}" --conf \
  'location = /err500.tar { return 500; } location = /moved.tar { return 302 /s-00.tar; } location = /moved404.tar { return 302 /nope.tar; }' ||
  die "nginx did not start"
pids+=("$NGINX_PID")
PORT=$NGINX_PORT
SPORT=$NGINX_SPORT
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
urls() { # urls BASE: the shard set under BASE
  local n
  for n in "${NAMES[@]}"; do printf '%s/%s\n' "$1" "$n"; done
}

"$WDS" ls "${LOCAL[@]}" >local.ls
[[ -s local.ls ]] || die "empty local listing"
total=$(wc -l <local.ls)
# listings compared as text: one line per sample (key, fields, sizes).
# the exact message: the URL once (the reader names it), then what was wrong
exact() { # exact NAME FILE TEXT: FILE is the one line TEXT
  if [[ $(cat "$2") == "$3" ]]; then ok "$1"; else bad "$1" "wanted: $3" "got:    $(head -c 600 "$2")"; fi
}
log_reset() { # empties the access log once earlier requests are in it
  nginx_log_settle access.log
  : >access.log
}

same() { # same NAME FILE: FILE equals local.ls
  if cmp -s local.ls "$2"; then ok "$1"; else bad "$1" "differs from the local listing:" "$(diff local.ls "$2" | head -5)"; fi
}

# -- plain reads, connection reuse --
log_reset
w ls ls "$BASE"/s-{00..03}.tar "$BASE"/z-{0..1}.tar.zst
expect_rc ls_http_exit 0 ls
same ls_http_equals_local ls.out
nginx_log_settle access.log 6
conns=$(awk '{print $1}' access.log | sort -u | wc -l)
maxreq=$(awk '{print $2}' access.log | sort -n | tail -1)
if [[ $conns == 1 && $maxreq == 6 ]]; then
  ok connection_reused_across_shards
else
  bad connection_reused_across_shards "$conns connections, at most $maxreq requests on one (wanted 1 and 6):" "$(cat access.log)"
fi

w moved ls "$BASE/moved.tar"
head -50 local.ls >first.ls
if [[ $RC == 0 ]] && cmp -s first.ls moved.out; then ok redirect_followed; else bad redirect_followed "exit $RC" "$(head -3 moved.err)"; fi

"$WDS" batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --save save-local "${LOCAL[@]}" >local.batches
mapfile -t HTTP_URLS < <(urls "$BASE")
w b batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --save save-http "${HTTP_URLS[@]}"
npy_sum() { (cd "$1" && cat ./*.bin.npy ./*.bin.offsets.npy ./*.cls.npy ./*__valid__.npy | md5sum); }
if [[ $RC == 0 ]] && cmp -s local.batches b.out && [[ $(npy_sum save-local) == "$(npy_sum save-http)" ]]; then
  ok batches_exact_http_equals_local
else
  bad batches_exact_http_equals_local "exit $RC" "$(head -3 b.err)" "$(diff local.batches b.out | head -3)"
fi

# -- one shard identity across schemes (docs/architecture.md) --
# An index made over http:// serves a loader given the same shards as
# pipe:curl commands (the forms webdataset users write) and spellings of the
# URL that differ only in case, default port, dot segments; an index made
# over pipe:curl records the URLs (no command) and serves http://.
w ixh index -o ix-http.json "${HTTP_URLS[@]}"
expect_rc index_over_http_exit 0 ixh
HP=127.0.0.1:$PORT
PIPE_URLS=("pipe:curl -s $BASE/s-00.tar" "pipe:curl -sL '$BASE/s-01.tar'"
  "pipe:curl -f -s -S -L \"$BASE/s-02.tar\"" "pipe:wget -q -O - $BASE/s-03.tar"
  "pipe:curl --silent --location -o - HTTP://$HP/./z-0.tar.zst" "pipe:curl -fsSL http://$HP/x/../z-1.tar.zst")
w pipeix batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --index ix-http.json --save save-pipeix "${PIPE_URLS[@]}"
if [[ $RC == 0 ]] && cmp -s local.batches pipeix.out && [[ $(npy_sum save-local) == "$(npy_sum save-pipeix)" ]]; then
  ok http_index_serves_pipe_curl_urls
else
  bad http_index_serves_pipe_curl_urls "exit $RC" "$(head -3 pipeix.err)" "$(diff local.batches pipeix.out | head -3)"
fi
w pipesum ls --summary --index ix-http.json "${PIPE_URLS[@]}"
if [[ $RC == 0 ]] && grep -q "$total" pipesum.out; then ok http_index_summary_of_pipe_urls; else bad http_index_summary_of_pipe_urls "exit $RC" "$(head -3 pipesum.err)"; fi
w ixp index --name pipes -o ix-pipe.json "${PIPE_URLS[@]}"
if [[ $RC == 0 ]] && ! grep -q 'pipe:' ix-pipe.json && grep -qF "\"url\": \"$BASE/s-01.tar\"" ix-pipe.json; then
  ok index_over_pipe_curl_records_urls
else
  bad index_over_pipe_curl_records_urls "exit $RC" "$(head -c 300 ix-pipe.json)" "$(head -3 ixp.err)"
fi
w httpix batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --index ix-pipe.json --save save-httpix "${HTTP_URLS[@]}"
if [[ $RC == 0 ]] && cmp -s local.batches httpix.out && [[ $(npy_sum save-local) == "$(npy_sum save-httpix)" ]]; then
  ok pipe_curl_index_serves_http_urls
else
  bad pipe_curl_index_serves_http_urls "exit $RC" "$(head -3 httpix.err)"
fi
# a shard the index does not hold (another port: another server) is refused
dead=$("$PYTHON3" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
w mism batches --mode exact --decode bin,cls --index ix-http.json \
  "pipe:curl -s http://127.0.0.1:$dead/s-00.tar" "${HTTP_URLS[@]:1}"
expect_rc mismatching_index_refused 1 mism
has mismatching_index_names_url mism.err "pipe:curl -s http://127.0.0.1:$dead/s-00.tar: not in the index"

# -- HTTP errors --
log_reset
w e404 ls --retries 3 "$BASE/nope.tar"
expect_rc http_404_exit 1 e404
exact http_404_message e404.err "wds ls: $BASE/nope.tar: HTTP 404 Not Found"
nginx_log_settle access.log 1
n404=$(grep -c ' 404 ' access.log || true)
if [[ $n404 == 1 ]]; then ok http_404_not_retried; else bad http_404_not_retried "$n404 requests"; fi
w r404 ls "$BASE/moved404.tar"
exact http_404_after_redirect_message r404.err "wds ls: $BASE/moved404.tar: HTTP 404 Not Found (redirected to $BASE/nope.tar)"

log_reset
w e500 ls --retries 1 "$BASE/err500.tar"
expect_rc http_500_exit 1 e500
exact http_500_message e500.err "wds ls: $BASE/err500.tar: HTTP 500 Internal Server Error (gave up after 2 attempts)"
nginx_log_settle access.log 2
n500=$(grep -c ' 500 ' access.log || true)
if [[ $n500 == 2 ]]; then ok http_500_retried_once; else bad http_500_retried_once "$n500 requests, wanted 2"; fi

w page ls "$BASE/page.tar"
expect_rc html_page_exit 1 page
has html_page_message page.err "$BASE/page.tar"
has html_page_says_html page.err "HTML"

# -- cut connections, resumed with Range --
for seed in 1 2 3; do
  proxy cut "$seed"
  log_reset
  mapfile -t CUT_URLS < <(urls "http://127.0.0.1:$PPORT")
  w cut$seed ls "${CUT_URLS[@]}"
  cuts=$(grep -c '^cut' "proxy-cut-$seed.port.log" || true)
  nginx_log_settle access.log 1
  if [[ $RC == 0 ]] && cmp -s local.ls "cut$seed.out" && ((cuts > 0)) && grep -q ' 206 ' access.log; then
    ok "cut_connections_resumed_seed$seed ($cuts cuts, $total samples once each)"
  else
    bad "cut_connections_resumed_seed$seed" "exit $RC, $cuts cuts" "$(head -3 "cut$seed.err")" "$(diff local.ls "cut$seed.out" | head -3)"
  fi
done
# every key once: the listings above are equal line for line; and batches:
w cutb batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
  --save save-cut "${CUT_URLS[@]}"
if [[ $RC == 0 ]] && cmp -s local.batches cutb.out && [[ $(npy_sum save-local) == "$(npy_sum save-cut)" ]]; then
  ok batches_exact_through_cuts_equals_local
else
  bad batches_exact_through_cuts_equals_local "exit $RC" "$(head -3 cutb.err)"
fi
# byte for byte: wds cat of a shard larger than the buffer, through cuts
"$WDS" cat www/big-0.tar >big.local
w bigcut cat "http://127.0.0.1:$PPORT/big-0.tar"
if [[ $RC == 0 ]] && cmp -s big.local bigcut.out; then
  ok cat_through_cuts_byte_identical
else
  bad cat_through_cuts_byte_identical "exit $RC" "$(head -3 bigcut.err)"
fi
w cut0 ls --retries 0 "http://127.0.0.1:$PPORT/z-0.tar.zst"
expect_rc cut_without_retries_fails 1 cut0
has cut_without_retries_names_url cut0.err "http://127.0.0.1:$PPORT/z-0.tar.zst"

# The cuts libcurl calls complete transfers (the source of a flake: a
# connection closed after a response's status line gave an empty shard), a
# connection closed at accept, a cut at byte 0 of the body, and bodies
# without Content-Length cut anywhere: each mode hits every other request.
for mode in accept status headers nolen; do
  proxy "$mode"
  mapfile -t F_URLS < <(urls "http://127.0.0.1:$PPORT")
  w "f$mode" ls "${F_URLS[@]}"
  hits=$(grep -c '^cut' "proxy-$mode-0.port.log" || true)
  if [[ $RC == 0 ]] && cmp -s local.ls "f$mode.out" && ((hits > 0)); then
    ok "fault_${mode}_listing_equals_local ($hits hits)"
  else
    bad "fault_${mode}_listing_equals_local" "exit $RC, $hits hits" "$(head -3 "f$mode.err")" "$(diff local.ls "f$mode.out" | head -3)"
  fi
  if [[ $mode == status || $mode == nolen ]]; then
    w "fb$mode" batches --mode exact --workers 2 --batch-size 16 --decode bin,cls \
      --save "save-$mode" "${F_URLS[@]}"
    if [[ $RC == 0 ]] && cmp -s local.batches "fb$mode.out" && [[ $(npy_sum save-local) == "$(npy_sum "save-$mode")" ]]; then
      ok "fault_${mode}_batches_exact_equals_local"
    else
      bad "fault_${mode}_batches_exact_equals_local" "exit $RC" "$(head -3 "fb$mode.err")"
    fi
  fi
done
"$WDS" cat www/big-0.tar >big.local
w fbig cat "http://127.0.0.1:$PPORT/big-0.tar"
if [[ $RC == 0 ]] && cmp -s big.local fbig.out; then
  ok cat_through_nolen_cuts_byte_identical
else
  bad cat_through_nolen_cuts_byte_identical "exit $RC" "$(head -3 fbig.err)"
fi

# -- stalls, retries exhausted --
proxy stall
t0=$(date +%s)
w stall ls --read-timeout 1 "http://127.0.0.1:$PPORT/z-0.tar.zst"
t1=$(date +%s)
expect_rc stall_exit 1 stall
# (the tar parser says where in the stream it waited)
msg=$(cat stall.err)
if [[ $msg == "wds ls: http://127.0.0.1:$PPORT/z-0.tar.zst: "*"no data for 1.0 s (the read timeout; raise it with --read-timeout or read_timeout_ms)" && $msg != *"z-0.tar.zst"*"z-0.tar.zst"* ]]; then
  ok stall_read_timeout_message
else
  bad stall_read_timeout_message "$msg"
fi
if ((t1 - t0 < 20)); then ok stall_ends_in_time; else bad stall_ends_in_time "$((t1 - t0)) s"; fi

proxy 503
w e503 ls --retries 2 "http://127.0.0.1:$PPORT/s-00.tar"
expect_rc retries_exhausted_exit 1 e503
exact retries_exhausted_503 e503.err "wds ls: http://127.0.0.1:$PPORT/s-00.tar: HTTP 503 Service Unavailable (gave up after 3 attempts)"
n503=$(grep -c connection "proxy-503-0.port.log" || true)
if ((n503 >= 1)); then ok retries_reached_the_proxy; else bad retries_reached_the_proxy "no connection"; fi

dead=$("$PYTHON3" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
w refused ls --retries 1 "http://127.0.0.1:$dead/s-00.tar"
expect_rc refused_exit 1 refused
# (libcurl's text says how many ms the connect took)
msg=$(cat refused.err)
if [[ $msg == "wds ls: http://127.0.0.1:$dead/s-00.tar: Failed to connect to 127.0.0.1 port $dead after "*" ms: Couldn't connect to server (gave up after 2 attempts)" ]]; then
  ok refused_message
else
  bad refused_message "$msg"
fi
has refused_says_connect refused.err "onnect"

# -- https --
if ((${#TLS[@]})); then
  SBASE=https://127.0.0.1:$SPORT
  export CURL_CA_BUNDLE=$TMP/cert.pem
  log_reset
  w https ls "$SBASE"/s-{00..03}.tar "$SBASE"/z-{0..1}.tar.zst
  unset CURL_CA_BUNDLE
  expect_rc https_exit 0 https
  same https_equals_local https.out
  # one TLS connection (one handshake) serves all six shards
  nginx_log_settle access.log 6
  conns=$(awk '{print $1}' access.log | sort -u | wc -l)
  maxreq=$(awk '{print $2}' access.log | sort -n | tail -1)
  if [[ $conns == 1 && $maxreq == 6 ]]; then
    ok https_connection_reused_across_shards
  else
    bad https_connection_reused_across_shards "$conns connections, at most $maxreq requests on one (wanted 1 and 6):" "$(cat access.log)"
  fi
  RC=0
  env -u CURL_CA_BUNDLE -u SSL_CERT_FILE -u SSL_CERT_DIR timeout 60 "$WDS" ls "$SBASE/s-00.tar" \
    >untrusted.out 2>untrusted.err || RC=$?
  expect_rc https_untrusted_exit 1 untrusted
  has https_untrusted_names_url untrusted.err "$SBASE/s-00.tar"
  has https_untrusted_says_certificate untrusted.err "certificate"
  if grep -q "gave up" untrusted.err; then bad https_untrusted_not_retried "$(cat untrusted.err)"; else ok https_untrusted_not_retried; fi
fi

# -- other schemes --
w pipe ls "pipe:curl -s $BASE/s-00.tar"
if [[ $RC == 0 ]] && cmp -s first.ls pipe.out; then ok pipe_curl_explicit; else bad pipe_curl_explicit "exit $RC" "$(head -3 pipe.err)"; fi
w ftp ls "ftp://127.0.0.1:$dead/s-00.tar"
expect_rc ftp_exit 1 ftp
has ftp_names_pipe_curl ftp.err "pipe:curl -s"

# nothing printed by the library beside the errors: a clean run's stderr is empty
if [[ ! -s ls.err && ! -s cut1.err ]]; then ok nothing_printed; else bad nothing_printed "$(head -3 ls.err cut1.err)"; fi

echo "$passed passed, $failed failed"
((failed == 0))
