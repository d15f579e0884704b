#!/usr/bin/env bash
# Tool test: .netrc read by wds under the shards' rules.
# libcurl's own reading opened ~/.netrc with a blocking open(): a FIFO
# there hung every http(s) read beyond the read timeout, cancel and
# SIGINT/SIGTERM. Now:
#
#   * a FIFO at $HOME/.netrc (no writer): `wds ls http://...` ends at once,
#     exit 1, naming the file and "a FIFO, not a regular file" (it hung;
#     killed here after 20 s); so does $NETRC naming one, and SIGTERM is
#     not needed;
#   * a normal ~/.netrc (0600) still authenticates (nginx's auth_basic),
#     silently; $NETRC names another file; a URL's user picks that user's
#     entry; a URL's own password wins over the file;
#   * a .netrc others can read (0644): one warning naming the file and its
#     mode, once per process (two shards, one line);
#   * a .netrc this user may not read (EACCES; run as nobody when root):
#     no credentials, as in curl, and one warning naming it (it failed
#     every http(s) read);
#   * a .netrc over 1 MiB: an error naming it.
# Skips (77) when nginx is not installed or wds was built without libcurl.
#
# Usage: netrc.sh WDS_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup netrc "timeout mkfifo" "$@"

unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY NETRC
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

mkdir www home
"$WDS" synth --shards 2 --samples 20 --size 100 www/s-%d.tar >/dev/null
printf 'alice:{PLAIN}PW-alice\nbob:{PLAIN}PW-bob\n' >htpasswd
nginx_start "$TMP" "$TMP/www" --conf "location /private/ { alias $TMP/www/; auth_basic private; auth_basic_user_file $TMP/htpasswd; }" ||
  die "nginx did not start"
HOST=127.0.0.1:$NGINX_PORT
URL=http://$HOST/private/s-0.tar

# l NAME [ENV=V...] -- ARGS...: `env ENV... wds ARGS` with HOME=home, into
# NAME.out/.err, status in RC; killed after 20 s (124).
l() {
  local name=$1
  shift
  local envs=(HOME="$TMP/home")
  while [[ $1 != -- ]]; do
    envs+=("$1")
    shift
  done
  shift
  RC=0
  timeout -s KILL 20 env "${envs[@]}" "$WDS" "$@" >"$name.out" 2>"$name.err" || RC=$?
}

# ---- a FIFO at ~/.netrc ----
mkfifo home/.netrc
l fifo -- ls --read-timeout 5 "$URL"
expect_rc "FIFO at ~/.netrc: exit 1 at once (it hung)" 1 fifo
has "FIFO at ~/.netrc: named" fifo.err \
  "the .netrc file $TMP/home/.netrc is a FIFO, not a regular file"
rm home/.netrc
mkfifo other-fifo
l fifo_env NETRC="$TMP/other-fifo" -- ls "$URL"
expect_rc "\$NETRC naming a FIFO: exit 1 at once" 1 fifo_env
has "\$NETRC naming a FIFO: named" fifo_env.err "$TMP/other-fifo is a FIFO"

# ---- a normal .netrc still authenticates ----
l none -- ls "$URL"
expect_rc "no .netrc: 401, exit 1" 1 none
has "no .netrc: 401" none.err 401
printf 'machine 127.0.0.1\n  login alice\n  password PW-alice\nmachine 127.0.0.1 login bob password PW-bob\n' >home/.netrc
chmod 600 home/.netrc
l ok -- ls "$URL" "http://$HOST/private/s-1.tar"
expect_rc "~/.netrc 0600: authenticates" 0 ok
check "~/.netrc 0600: every sample" test "$(wc -l <ok.out)" = 40
check "~/.netrc 0600: no warning" test ! -s ok.err
l bob -- ls "http://bob@$HOST/private/s-0.tar"
expect_rc "the URL's user picks bob's entry" 0 bob
l wrongpw -- ls "http://alice:nope@$HOST/private/s-0.tar"
expect_rc "the URL's password wins (401)" 1 wrongpw
printf 'machine 127.0.0.1 login alice password PW-alice\n' >elsewhere
chmod 600 elsewhere
l env NETRC="$TMP/elsewhere" HOME="$TMP/nohome" -- ls "$URL"
expect_rc "\$NETRC names the file" 0 env

# ---- readable by others: warned once ----
chmod 644 home/.netrc
l warn -- ls "$URL" "http://$HOST/private/s-1.tar"
expect_rc "~/.netrc 0644: still authenticates" 0 warn
has "~/.netrc 0644: warned, naming the file and mode" warn.err \
  "warning: the .netrc file $TMP/home/.netrc can be read by other users (mode 644)"
check "~/.netrc 0644: warned once for two shards" \
  test "$(grep -c 'can be read by' warn.err)" = 1

# ---- unreadable by this user (root's, say): no credentials, warned once ----
# As curl: EACCES is not an error (it failed every http(s) read). As root a
# mode-000 file is still readable, so the reader runs as nobody (setpriv).
printf 'machine 127.0.0.1 login alice password PW-alice\n' >home/.netrc
chmod 000 home/.netrc
runas=()
if [[ $(id -u) == 0 ]]; then
  chmod 711 "$TMP" home
  runas=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
fi
if [[ $(id -u) != 0 ]] || { command -v setpriv >/dev/null &&
  setpriv --reuid=65534 --regid=65534 --clear-groups -- test -x "$WDS"; }; then
  RC=0
  timeout -s KILL 20 env HOME="$TMP/home" "${runas[@]}" "$WDS" ls \
    "http://$HOST/s-0.tar" "http://$HOST/s-1.tar" >eacces.out 2>eacces.err ||
    RC=$?
  expect_rc "unreadable ~/.netrc: a public URL still reads" 0 eacces
  check "unreadable ~/.netrc: every sample" test "$(wc -l <eacces.out)" = 40
  has "unreadable ~/.netrc: warned, naming the file" eacces.err \
    "warning: cannot read the .netrc file $TMP/home/.netrc (Permission denied)"
  check "unreadable ~/.netrc: warned once for two shards" \
    test "$(grep -c 'cannot read the .netrc' eacces.err)" = 1
  RC=0
  timeout -s KILL 20 env HOME="$TMP/home" "${runas[@]}" "$WDS" ls "$URL" \
    >eacces401.out 2>eacces401.err || RC=$?
  expect_rc "unreadable ~/.netrc: a private URL gets 401 (no credentials)" 1 eacces401
  has "unreadable ~/.netrc: 401" eacces401.err 401
else
  echo "SKIP (this check): nobody cannot run $WDS here"
fi
chmod 700 "$TMP"
chmod 600 home/.netrc

# ---- too large ----
chmod 600 home/.netrc
head -c $((1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >>home/.netrc
l big -- ls "$URL"
expect_rc "~/.netrc over 1 MiB: exit 1" 1 big
has "~/.netrc over 1 MiB: named" big.err "$TMP/home/.netrc is too large"

echo "$passed passed, $failed failed"
((failed == 0))
