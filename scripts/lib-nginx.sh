# lib-nginx.sh — Debian's nginx on loopback, without root, for the HTTP
# tests and benchmarks (tests/integration/http.sh, scripts/bench-http.sh).
# Sourced, not run:
#
#   source "$root/scripts/lib-nginx.sh"
#   nginx_find || { echo "no nginx"; exit 77; }
#   nginx_start DIR ROOT [--log] [--tls CERT KEY] [--conf 'TEXT']
#   ... http://127.0.0.1:$NGINX_PORT/ (https://127.0.0.1:$NGINX_SPORT/) ...
#   nginx_stop
#
# nginx_start writes DIR/nginx.conf (pid, error log, temp paths all in DIR;
# as root, the worker runs as root so that it can read a private DIR),
# serves ROOT on a free loopback port, and returns once it answers (a few
# tries: a port is picked, then bound). --log writes DIR/access.log, one
# line per request: "$connection $connection_requests $status $request_uri"
# (connection reuse shows as one connection number with several requests).
# --tls adds an https server on a second port with that certificate. --conf
# adds TEXT inside both server blocks (locations). Sets NGINX_PID,
# NGINX_PORT, NGINX_SPORT; on failure prints why and returns 1.
# nginx_log_settle FILE [MIN]: waits (at most 6 s) until FILE has at least
# MIN lines (default 0) and has not grown for 0.2 s. nginx writes a
# request's line after the response went out, so a client can exit before
# its last request is logged; call this before counting lines.
# nginx_tls_cert DIR: a self-signed certificate for 127.0.0.1 in
# DIR/cert.pem and DIR/key.pem (returns 1 without the openssl command).
# Needs curl (the readiness probe) and python3 (free ports; $PYTHON3 if set).

NGINX=${NGINX:-}
NGINX_PID=
NGINX_PORT=
NGINX_SPORT=

nginx_find() {
  [[ -n $NGINX ]] || NGINX=$(command -v nginx || true)
  [[ -n $NGINX ]] || [[ ! -x /usr/sbin/nginx ]] || NGINX=/usr/sbin/nginx
  [[ -n $NGINX ]]
}

nginx_log_settle() {
  local f=$1 min=${2:-0} prev=-1 n stable=0 i
  for ((i = 0; i < 60; i++)); do
    n=$(wc -l <"$f" 2>/dev/null || echo 0)
    if ((n >= min && n == prev)); then
      ((++stable >= 2)) && return 0
    else
      stable=0
    fi
    prev=$n
    sleep 0.1
  done
  return 0
}

nginx_tls_cert() {
  command -v openssl >/dev/null 2>&1 &&
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1/key.pem" -out "$1/cert.pem" \
      -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1
}

nginx_start() {
  local dir=$1 root=$2 log=0 cert="" key="" conf=""
  shift 2
  while (($#)); do
    case $1 in
    --log) log=1 ;;
    --tls)
      cert=$2 key=$3
      shift 2
      ;;
    --conf)
      conf=$2
      shift
      ;;
    *)
      echo "nginx_start: unknown option $1" >&2
      return 1
      ;;
    esac
    shift
  done
  nginx_find || {
    echo "nginx_start: nginx is not installed (apt-get install nginx)" >&2
    return 1
  }
  local py=${PYTHON3:-python3} try port sport pid i
  for try in 1 2 3 4 5; do
    read -r port sport < <("$py" -c 'import socket
a, b = socket.socket(), socket.socket()
a.bind(("127.0.0.1", 0)); b.bind(("127.0.0.1", 0))
print(a.getsockname()[1], b.getsockname()[1])')
    local user="" access="access_log off;" tls=""
    [[ $(id -u) != 0 ]] || user="user root $(id -gn);"
    [[ $log == 0 ]] || access="log_format conn '\$connection \$connection_requests \$status \$request_uri';
  access_log $dir/access.log conn;"
    [[ -z $cert ]] || tls="server { listen 127.0.0.1:$sport ssl; ssl_certificate $cert; ssl_certificate_key $key; root $root; $conf }"
    cat >"$dir/nginx.conf" <<CONF
$user
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 256; }
http {
  $access
  client_body_temp_path $dir/t-body;
  proxy_temp_path $dir/t-proxy;
  fastcgi_temp_path $dir/t-fastcgi;
  uwsgi_temp_path $dir/t-uwsgi;
  scgi_temp_path $dir/t-scgi;
  default_type application/octet-stream;
  sendfile on;
  keepalive_requests 100000;
  server { listen 127.0.0.1:$port; root $root; $conf }
  $tls
}
CONF
    "$NGINX" -e "$dir/error.log" -p "$dir" -c "$dir/nginx.conf" &
    pid=$!
    for ((i = 0; i < 50; i++)); do
      # any answer (even a 403 for the directory) means it listens
      if curl -s -o /dev/null "http://127.0.0.1:$port/"; then
        NGINX_PID=$pid NGINX_PORT=$port NGINX_SPORT=$sport
        return 0
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  echo "nginx did not start: $(tail -3 "$dir/error.log" 2>/dev/null)" >&2
  return 1
}

nginx_stop() {
  [[ -z $NGINX_PID ]] && return 0
  kill "$NGINX_PID" 2>/dev/null || true
  wait "$NGINX_PID" 2>/dev/null || true
  NGINX_PID=
}
