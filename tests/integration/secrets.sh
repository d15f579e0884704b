#!/usr/bin/env bash
# Tool test: URL secrets never leave in an output.
#
# Shards are served by Debian's nginx on loopback (scripts/lib-nginx.sh, as
# in http.sh), named by URLs that carry a password (user:PASS@), a token=
# and a presigned signature (X-Amz-Signature=, sig=). None of the secrets
# may appear in any stdout, stderr or file written by:
#   * wds verify: its text report (the URL before each problem, once) and
#     --json "url";
#   * a pipe:curl command that fails (the command in the message);
#   * credentials a pipe: command carries besides its URL (-u USER:PASS,
#     an Authorization or X-Amz-* header, AWS_SESSION_TOKEN=...): in its
#     failure, wds ls --json "__url__", and the index wds index writes,
#     which still serves the command;
#   * wds-train: its "source N:" line and its --json "spec";
#   * wds index: the index file ("url", and "name" from the first SPEC),
#     which still serves the URLs with their secrets, and with other ones
#     (a new signature): wds ls --summary --index and the loader's exact
#     mode find every shard;
#   * wds ls --json "__url__", wds batches --save's __rows__.json "urls";
#   * the AWS_ENDPOINT_URL_S3 errors, spec-parse errors (unbalanced brace,
#     --max-urls), an http 404.
# Each check also looks for "***" where the secret was, so a test that
# printed nothing would fail. Credentials can travel outside URLs: an
# http(s) password from ~/.netrc (libcurl's optional netrc). Skips (77) when nginx is not installed or
# wds was built without libcurl.
#
# Usage: secrets.sh WDS_BINARY WDS_TRAIN_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup secrets "timeout curl" "$@"
TRAIN=${2:?usage: secrets.sh WDS_BINARY WDS_TRAIN_BINARY}
[[ $TRAIN == /* ]] || TRAIN=$OLDPWD/$TRAIN
[[ -x $TRAIN ]] || die "wds-train binary '$TRAIN' not found"

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
trap 'nginx_stop; wds_test_cleanup' EXIT

mkdir www out
"$WDS" synth --shards 2 --samples 20 --size 100 www/s-%d.tar >/dev/null
head -c 3000 www/s-0.tar >www/cut.tar # truncated: verify reports it
cat >gen.py <<'PY'
import io, random, sys, tarfile
from PIL import Image
rng = random.Random(1)
with tarfile.open(sys.argv[1], "w", format=tarfile.USTAR_FORMAT) as tf:
    for k in range(16):
        c = rng.randrange(4)
        im = Image.new("L", (8, 8)); im.putdata([rng.randrange(256) for _ in range(64)])
        b = io.BytesIO(); im.save(b, "PNG")
        for ext, d in (("png", b.getvalue()), ("cls", str(c).encode())):
            ti = tarfile.TarInfo(f"s{k:03d}.{ext}"); ti.size = len(d); ti.mtime = 0
            tf.addfile(ti, io.BytesIO(d))
PY
"$PYTHON3" gen.py www/img.tar || die "generating PNG shards (python3 with Pillow)"
# /private/: the same files behind HTTP basic authentication (alice)
printf 'alice:{PLAIN}PW-netrc\nbob:{PLAIN}PW-s3cret-5\n' >htpasswd
nginx_start "$TMP" "$TMP/www" --conf "location /private/ { alias $TMP/www/; auth_basic private; auth_basic_user_file $TMP/htpasswd; }" ||
  die "nginx did not start"
HOST=127.0.0.1:$NGINX_PORT

# The secrets: every one has "s3cret" in it, which no output may hold.
AUTH='alice:PW-s3cret-1@'
QUERY='token=TOK-s3cret-2&X-Amz-Signature=SIG-s3cret-3&sig=AZ-s3cret-4'
url() { echo "http://$AUTH$HOST/$1?$QUERY"; }

# run NAME CMD...: runs CMD with stdout and stderr into out/NAME.{out,err}
# (status in out/NAME.rc).
run() {
  local name=$1 rc=0
  shift
  timeout 120 "$@" >"out/$name.out" 2>"out/$name.err" || rc=$?
  echo "$rc" >"out/$name.rc"
}
# clean NAME FILE...: no secret in the files, and "***" in at least one
# (what hid it).
clean() {
  local name=$1 hits
  shift
  hits=$(grep -l 's3cret' "$@" 2>/dev/null || true)
  if [[ -n $hits ]]; then
    bad "$name: no secret" "$(grep -h -o '.\{0,40\}s3cret.\{0,10\}' "$@" | head -3)"
  elif ! grep -q -F '***' "$@"; then
    bad "$name: no secret" "no *** either: $(head -c 300 "$@")"
  else
    ok "$name: no secret"
  fi
}

# ---- wds verify ----
run verify "$WDS" verify "$(url cut.tar)"
clean "verify text" out/verify.out out/verify.err
check "verify text: the problem reported" grep -q 'truncated' out/verify.out
check "verify text: the URL once per line" \
  test "$(grep -o "127.0.0.1:$NGINX_PORT" out/verify.out | wc -l)" = 1
run verify_json "$WDS" verify --json "$(url cut.tar)"
clean "verify --json" out/verify_json.out out/verify_json.err
check "verify --json: valid JSON" "$PYTHON3" -c \
  'import json,sys; d=json.load(open(sys.argv[1])); assert d["problems"][0]["url"].startswith("http://alice:***@")' \
  out/verify_json.out

# ---- a pipe:curl command that fails ----
run curl "$WDS" ls "pipe:curl -sf '$(url missing.tar)'"
clean "pipe:curl failure" out/curl.err
check "pipe:curl failure: the exit status named" grep -q 'failed with exit status 22' out/curl.err

# ---- credentials inside a pipe: command ----
cmd_ok="pipe:curl -sf -u bob:PW-s3cret-5 http://$HOST/private/s-0.tar"
cmd_bad="pipe:AWS_SESSION_TOKEN=TOK-s3cret-6 curl -sf -u 'bob:PW-s3cret-5' -H 'X-Amz-Security-Token: s3cret-7' --header \"Authorization: Bearer s3cret-8\" http://$HOST/missing.tar"
run cmd_fail "$WDS" ls "$cmd_bad"
clean "pipe: command's credentials, failure" out/cmd_fail.err
check "pipe: command's credentials, failure: the exit status named" grep -q 'failed with exit status 22' out/cmd_fail.err
check "pipe: command's credentials, failure: the command readable" grep -q -F \
  "curl -sf -u 'bob:***' -H 'X-Amz-Security-Token: ***' --header \"Authorization: ***\"" out/cmd_fail.err
run cmd_json "$WDS" ls --json "$cmd_ok"
check "pipe: command's credentials, ls --json: 20 samples" test "$(wc -l <out/cmd_json.out)" = 20
clean "pipe: command's credentials, ls --json __url__" out/cmd_json.out out/cmd_json.err
run cmd_index "$WDS" index -o out/cmd_index.json "$cmd_ok"
check "pipe: command's credentials, index: exits 0" test "$(cat out/cmd_index.rc)" = 0
clean "pipe: command's credentials, index file" out/cmd_index.json out/cmd_index.out out/cmd_index.err
run cmd_summary "$WDS" ls --summary --allow-pipe-from-files --index out/cmd_index.json "$cmd_ok"
check "pipe: command's credentials, index: serves the command" grep -q '^samples     20$' out/cmd_summary.out
clean "pipe: command's credentials, index lookup" out/cmd_summary.* out/cmd_index.json

# ---- wds-train ----
run train "$TRAIN" --source "$(url img.tar)" --device cpu --image-size 8 --channels 1 \
  --hidden 8 --batch-size 4 --epochs 1 --seed 1 --json out/train.json
check "wds-train: exits 0" test "$(cat out/train.rc)" = 0
check "wds-train: the source line" grep -q 'wds-train: source 0: http://alice:\*\*\*@' out/train.out
clean "wds-train source line" out/train.out out/train.err
clean "wds-train --json spec" out/train.json

# ---- wds index: the file, and it still serves the URLs ----
run index "$WDS" index -o out/index.json "$(url s-0.tar)" "$(url s-1.tar)"
check "index: exits 0" test "$(cat out/index.rc)" = 0
clean "index file" out/index.json
clean "index messages" out/index.out out/index.err out/index.json
check "index: the name without secrets" grep -q '"name": "http://alice:\*\*\*@' out/index.json
other() { echo "http://$AUTH$HOST/$1?token=TOK-other&X-Amz-Signature=SIG-other&sig=AZ-other"; }
for how in url other; do
  run "summary_$how" "$WDS" ls --summary --index out/index.json "$($how s-0.tar)" "$($how s-1.tar)"
  check "index serves the URLs ($how secrets): ls --summary --index" \
    grep -q '^samples     40$' "out/summary_$how.out"
  run "exact_$how" "$WDS" batches --mode exact --index out/index.json --decode cls \
    --batch-size 8 "$($how s-0.tar)" "$($how s-1.tar)"
  check "index serves the URLs ($how secrets): exact mode" \
    test "$(cat "out/exact_$how.rc"):$(wc -l <"out/exact_$how.out")" = 0:5
done
clean "index lookups" out/summary_url.* out/exact_url.* out/index.json

# ---- wds ls --json, wds batches --save ----
run ls_json "$WDS" ls --json "$(url s-0.tar)"
check "ls --json: 20 samples" test "$(wc -l <out/ls_json.out)" = 20
clean "ls --json __url__" out/ls_json.out out/ls_json.err
mkdir out/save
run save "$WDS" batches --decode cls --batch-size 10 --save out/save "$(url s-0.tar)"
check "batches --save: rows written" test -s out/save/e0-b000000.__rows__.json
clean "batches --save rows" out/save/* out/save.out out/save.err

# ---- credentials outside the URL: ~/.netrc ----
mkdir home
run private_none env HOME="$TMP/home" "$WDS" ls "http://$HOST/private/s-0.tar"
check "netrc: without one, 401" grep -q '401' out/private_none.err
printf 'machine 127.0.0.1 login alice password PW-netrc\n' >home/.netrc
chmod 600 home/.netrc
run private_netrc env HOME="$TMP/home" "$WDS" ls "http://$HOST/private/s-0.tar"
check "netrc: the password from ~/.netrc" \
  test "$(cat out/private_netrc.rc):$(wc -l <out/private_netrc.out)" = 0:20

# ---- errors ----
export AWS_ACCESS_KEY_ID=AKIDEXAMPLE AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI
AWS_ENDPOINT_URL_S3="http://$AUTH$HOST/?$QUERY" run endpoint_query "$WDS" ls s3://b/k.tar
check "AWS_ENDPOINT_URL_S3 with a query: refused" grep -q 'AWS_ENDPOINT_URL_S3=.*has a query' out/endpoint_query.err
clean "AWS_ENDPOINT_URL_S3 with a query" out/endpoint_query.err
AWS_ENDPOINT_URL_S3="ftp://${AUTH}h/" run endpoint_ftp "$WDS" ls s3://b/k.tar
check "AWS_ENDPOINT_URL_S3 not http: refused" grep -q 'is not an http' out/endpoint_ftp.err
clean "AWS_ENDPOINT_URL_S3 not http" out/endpoint_ftp.err
run brace "$WDS" ls "http://$AUTH$HOST/s-{0..1.tar?$QUERY"
check "spec error: unbalanced brace" grep -q 'unbalanced brace' out/brace.err
clean "spec error: unbalanced brace" out/brace.err
run limit "$WDS" expand --max-urls 1 "$(url 's-{0..1}.tar')"
check "spec error: --max-urls" grep -q 'over the limit of 1' out/limit.err
clean "spec error: --max-urls" out/limit.err
run notfound "$WDS" ls "$(url nope.tar)"
check "http 404 named" grep -q '404' out/notfound.err
clean "http 404" out/notfound.err

echo "$passed passed, $failed failed"
((failed == 0))
