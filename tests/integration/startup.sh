#!/usr/bin/env bash
# Tool test: libcurl is loaded only by runs that open an http(s):// shard
# (shards/curl_dl.c; docs/performance.md, "Start-up").
#   * `wds ls` of a local shard does not load libcurl (the dynamic loader's
#     LD_DEBUG=files log names no libcurl);
#   * `wds ls` of an http:// URL on a refused port loads it on use and fails
#     with a message naming the URL;
#   * the wds binary does not name libcurl as a needed library.
# Skips (77) when wds was built without libcurl.
#
# Usage: startup.sh WDS_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup startup "readelf" "$1"

unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
printf 'x' >0.txt
"$GTAR" --format=ustar -cf s.tar 0.txt

RC=0
LD_DEBUG=files "$WDS" ls s.tar >local.out 2>local.err || RC=$?
if [[ $RC == 0 ]] && grep -q '^0' local.out && ! grep -q libcurl local.err; then
  ok local_run_loads_no_libcurl
else
  bad local_run_loads_no_libcurl "exit $RC" "$(grep libcurl local.err | head -2)" "$(head -2 local.out)"
fi

if readelf -d "$WDS" | grep NEEDED | grep -q libcurl; then
  bad not_linked "$(readelf -d "$WDS" | grep libcurl)"
else
  ok not_linked
fi

# A port nothing listens on: bind one, close it.
port=$("$PYTHON3" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port/s.tar"
RC=0
LD_DEBUG=files timeout 60 "$WDS" ls --retries 0 "$url" >http.out 2>http.err || RC=$?
if grep -q "built without libcurl" http.err; then
  echo "SKIP: wds was built without libcurl"
  exit 77
fi
if [[ $RC == 1 ]] && grep -q "libcurl.so" http.err && grep -q "wds ls: .*$url" http.err; then
  ok http_run_loads_libcurl_on_use
else
  bad http_run_loads_libcurl_on_use "exit $RC" "$(grep -v '^ *[0-9]*:' http.err | head -3)"
fi

echo "$passed passed, $failed failed"
((failed == 0))
