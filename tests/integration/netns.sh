#!/usr/bin/env bash
# Integration test: many machines, simulated. Each node of a job runs in its
# own network namespace, joined to the others by veth links on a bridge (in
# a namespace of its own), so the rendezvous, the job's links and the data
# travel over real interfaces (10.231.0.1 node 0, .2 node 1, .3 the server):
#
#   a) two `wds-train` nodes of two CPU ranks each (--nodes 2, --master-addr
#      10.231.0.1): identical weights on all 4 ranks after every step, the
#      same weights as the same job over loopback, and the traffic went
#      through node 1's eth0;
#   b) `torchrun --nnodes 2` (one process per node) and examples/
#      train_ddp.py, gloo on eth0: equal steps and weights on both ranks
#      (needs torch: the python of BUILD/py-venv, as python_ddp uses, or
#      WDS_NETNS_TORCH_PYTHON; skipped, saying so, without it);
#   c) the shards served over HTTP from a third namespace (nginx) through
#      netns_proxy.py, which adds latency and drops and cuts connections
#      (seeded; this kernel has no netem qdisc): the two nodes' training
#      ends with the weights of (a), read from local files (skipped, saying
#      so, without nginx or libcurl);
#   d) a node killed (SIGKILL) mid-run, node 1 and then node 0 (the one
#      that serves the rendezvous): the other stops within 30 s, exit 1,
#      with a message naming the process lost.
#
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip`: skips
# (77) saying why where namespaces or veth links cannot be made. Every
# namespace and process it made is removed on every exit path.
#
# Usage: netns.sh WDS_TRAIN_BINARY WDS_BINARY BUILD_DIR
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup netns "timeout" "$@"
TRAIN=$WDS
WDS_CLI=${2:?usage: netns.sh WDS_TRAIN WDS BUILD_DIR}
BUILD=${3:?usage: netns.sh WDS_TRAIN WDS BUILD_DIR}
ROOT=$(cd "$HERE/../.." && pwd)
T0=$SECONDS

skip() {
  echo "SKIP: $*"
  exit 77
}
((EUID == 0)) || skip "not root: network namespaces and veth links need CAP_SYS_ADMIN and CAP_NET_ADMIN"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (apt-get install iproute2)"

NSP=wdsnet$$ # namespaces: $NSP-br (the bridge), -n0, -n1, -srv
NAMESPACES=()
pids=()
cleanup() {
  local p ns
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  for ns in "${NAMESPACES[@]}"; do
    # anything still running in our namespaces was started here
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  wds_test_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# --- the network ------------------------------------------------------------
for n in br n0 n1 srv; do
  out=$(ip netns add "$NSP-$n" 2>&1) || skip "ip netns add failed: $out"
  NAMESPACES+=("$NSP-$n")
done
ADDR=([0]=10.231.0.1 [1]=10.231.0.2 [2]=10.231.0.3)
NODES=(n0 n1 srv)
out=$(ip -n "$NSP-br" link add br0 type bridge stp_state 0 forward_delay 0 2>&1) ||
  skip "no bridge: $out"
ip -n "$NSP-br" link set lo up
ip -n "$NSP-br" link set br0 up
for i in 0 1 2; do
  ns=$NSP-${NODES[i]}
  out=$(ip link add name eth0 netns "$ns" type veth peer name "p$i" netns "$NSP-br" 2>&1) ||
    skip "no veth links: $out"
  ip -n "$NSP-br" link set "p$i" master br0
  ip -n "$NSP-br" link set "p$i" up
  ip -n "$ns" addr add "${ADDR[i]}/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
done
# on_ns NS CMD...: CMD in namespace $NSP-NS, in the foreground. In the
# background, `ip netns exec $NSP-NS CMD &` (ip execs CMD: $! is CMD's
# process; a function put in the background would be a subshell's).
on_ns() {
  local ns=$1
  shift
  ip netns exec "$NSP-$ns" "$@"
}
# The bridge forwards: node 1 reaches node 0 (a listener there answers).
ip netns exec "$NSP-n0" "$PYTHON3" -c 'import socket, time
s = socket.socket(); s.bind(("10.231.0.1", 9)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.sendall(b"hi")' &
probe=$!
reach=
for _ in $(seq 1 100); do
  if on_ns n1 "$PYTHON3" -c 'import socket
c = socket.create_connection(("10.231.0.1", 9), timeout=1); assert c.recv(2) == b"hi"' 2>/dev/null; then
    reach=1
    break
  fi
  sleep 0.1
done
wait "$probe" 2>/dev/null || true
[[ -n $reach ]] || skip "the namespaces were made, but node 1 cannot reach node 0 over the bridge"
echo "# namespaces $NSP-{br,n0,n1,srv}: 10.231.0.1 (node 0), .2 (node 1), .3 (server) on a bridge ($((SECONDS - T0)) s)"

# --- data -----------------------------------------------------------------
# train.sh's shards: 16x16 gray PNGs, 10 classes, 4 shards of 250.
sed -n '/^cat >gen.py <<.PY.$/,/^PY$/p' "$HERE/train.sh" | sed '1d;$d' >gen.py
[[ -s gen.py ]] || die "the shard generator of train.sh not found"
"$PYTHON3" gen.py . train 250,250,250,250 1 || die "generating shards (python3 with Pillow)"
SPEC="$PWD/train-{000..003}.tar"

json_check() { # FILE PYTHON_EXPR over lines, steps, summary
  "$PYTHON3" - "$1" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "step" in l and "loss" in l]
summary = lines[-1]["summary"]
ok = eval(sys.argv[2])
if not ok:
    print("    check failed:", sys.argv[2], "summary:", summary)
sys.exit(0 if ok else 1)
PY
}
summary_sums() { "$PYTHON3" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["summary"]["weights_checksum"])' "$1"; }

# shellcheck disable=SC2054  # --hidden 64,32 is one argument
COMMON=(--device cpu --image-size 16 --channels 1 --hidden 64,32 --lr 0.05 --seed 7
  --batch-size 8 --epochs 2 --ranks 2 --nodes 2 --rdv-timeout 60 --collective-timeout 60)
# two_nodes OUT MASTER SPEC [ARGS]: node r runs in namespace n<r> (or here,
# over loopback, when MASTER is 127.0.0.1), logs in OUT<r>.out and
# OUT<r>.json; RC is 0 when both ended well.
two_nodes() {
  local out=$1 master=$2 spec=$3 r port=29500 p=()
  shift 3
  # (below Linux's ephemeral range, 32768 up, which connections take)
  [[ $master != 127.0.0.1 ]] || port=$((12000 + RANDOM % 20000 % 16000))
  for r in 0 1; do
    local pre=(ip netns exec "$NSP-n$r")
    [[ $master != 127.0.0.1 ]] || pre=()
    CUDA_VISIBLE_DEVICES='' "${pre[@]}" timeout 180 "$TRAIN" "${COMMON[@]}" --node-rank "$r" \
      --master-addr "$master" --master-port "$port" --train "$spec" --log-every 1 \
      --log-checksums --json "$out$r.json" "$@" >"$out$r.out" 2>&1 &
    p+=($!)
    pids+=($!)
  done
  RC=0
  wait "${p[0]}" || RC=1
  wait "${p[1]}" || RC=1
}
# tx_bytes NS: bytes sent on the namespace's eth0.
tx_bytes() { on_ns "$1" cat /sys/class/net/eth0/statistics/tx_bytes; }

# --- a) two wds-train nodes over the veth links -------------------------------
t=$SECONDS
tx0=$(tx_bytes n1)
two_nodes net 10.231.0.1 "$SPEC"
tx=$(($(tx_bytes n1) - tx0))
net_sums=
if ((RC == 0)) &&
  json_check net0.json "len(steps) == summary['steps'] == 64 and all(len(s['weights_checksum']) == 4 and len(set(s['weights_checksum'])) == 1 for s in steps)" &&
  net_sums=$(summary_sums net0.json) && [[ $(summary_sums net1.json) == "$net_sums" ]] &&
  ((tx > 1000000)); then
  ok "a) 2 nodes x 2 CPU ranks over veth: identical weights on all 4 ranks after each of 64 steps, node 1 sent $((tx / 1024)) KiB on eth0 ($((SECONDS - t)) s)"
else
  bad "a) 2 nodes x 2 CPU ranks over veth" "rc $RC, node 1 sent $tx bytes" "$(tail -n 2 net0.out net1.out)"
fi
# Over loopback the port is shared with the rest of the machine (other
# tests at once): a port found taken is tried again with another.
for try in 1 2 3; do
  two_nodes lo 127.0.0.1 "$SPEC"
  ((RC != 0)) && grep -q "Address already in use" lo0.out || break
  echo "# loopback port taken (try $try): another"
done
if ((RC == 0)) && [[ -n $net_sums && $(summary_sums lo0.json) == "$net_sums" ]]; then
  ok "a) the same job over loopback ends with the same weights"
else
  bad "a) the same job over loopback" "rc $RC: $(summary_sums lo0.json 2>&1) vs $net_sums" "$(tail -n 2 lo0.out lo1.out)"
fi

# --- b) torchrun --nnodes 2 and examples/train_ddp.py (gloo) -----------------
TPY=${WDS_NETNS_TORCH_PYTHON:-$BUILD/py-venv/bin/python}
if [[ ! -x $TPY ]] || ! "$TPY" -c 'import torch' 2>/dev/null; then
  echo "skip b) torchrun --nnodes 2: no python with torch at $TPY (the python tests' environment; or set WDS_NETNS_TORCH_PYTHON)"
elif [[ ! -d $BUILD/python/wds ]] || ! PYTHONPATH=$BUILD/python "$TPY" -c 'import wds' 2>/dev/null; then
  echo "skip b) torchrun --nnodes 2: the wds extension of $BUILD/python does not import in $TPY"
else
  t=$SECONDS
  p=()
  for r in 0 1; do
    PYTHONPATH=$BUILD/python OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 CUDA_VISIBLE_DEVICES='' \
      ip netns exec "$NSP-n$r" timeout 240 "$TPY" -m torch.distributed.run --nnodes 2 --nproc-per-node 1 \
      --node-rank "$r" --master-addr 10.231.0.1 --master-port 29600 \
      "$ROOT/examples/train_ddp.py" --train "$SPEC" --image-size 16 --epochs 1 \
      --batch-size 16 --workers 1 --shuffle-buffer 200 --seed 3 >"ddp$r.out" 2>&1 &
    p+=($!)
    pids+=($!)
  done
  RC=0
  wait "${p[0]}" || RC=1
  wait "${p[1]}" || RC=1
  s0=$(grep -o '^rank 0: weights [0-9a-f]*' ddp0.out | cut -d' ' -f4 || true)
  s1=$(grep -o '^rank 1: weights [0-9a-f]*' ddp1.out | cut -d' ' -f4 || true)
  n0=$(grep -o '^rank 0: steps [0-9]*' ddp0.out | cut -d' ' -f4 || true)
  n1=$(grep -o '^rank 1: steps [0-9]*' ddp1.out | cut -d' ' -f4 || true)
  if ((RC == 0)) && [[ -n $s0 && $s0 == "$s1" && -n $n0 && $n0 == "$n1" ]] &&
    grep -q 'world 2' ddp0.out; then
    ok "b) torchrun --nnodes 2, train_ddp.py (gloo on eth0): $n0 steps and weights ${s0:0:16}... on both ranks ($((SECONDS - t)) s)"
  else
    bad "b) torchrun --nnodes 2" "rc $RC, steps $n0/$n1, weights $s0/$s1" "$(tail -n 4 ddp0.out ddp1.out)"
  fi
fi

# --- c) HTTP from a third namespace through a slow, lossy proxy --------------
source "$ROOT/scripts/lib-nginx.sh"
probe=$("$WDS_CLI" ls http://127.0.0.1:1/x.tar 2>&1 || true)
if ! nginx_find; then
  echo "skip c) HTTP through a lossy proxy: nginx is not installed (apt-get install nginx)"
elif [[ $probe == *"built without libcurl"* ]]; then
  echo "skip c) HTTP through a lossy proxy: wds was built without libcurl"
else
  t=$SECONDS
  mkdir -p www ngx
  cp train-00?.tar www/
  cat >ngx/nginx.conf <<CONF
user root $(id -gn);
daemon off;
worker_processes 1;
pid $PWD/ngx/nginx.pid;
error_log $PWD/ngx/error.log;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path $PWD/ngx/t-body;
  proxy_temp_path $PWD/ngx/t-proxy;
  fastcgi_temp_path $PWD/ngx/t-fastcgi;
  uwsgi_temp_path $PWD/ngx/t-uwsgi;
  scgi_temp_path $PWD/ngx/t-scgi;
  default_type application/octet-stream;
  keepalive_requests 100000;
  server { listen 127.0.0.1:8080; root $PWD/www; }
}
CONF
  ip netns exec "$NSP-srv" "$NGINX" -e "$PWD/ngx/error.log" -p "$PWD/ngx" -c "$PWD/ngx/nginx.conf" &
  pids+=($!)
  ip netns exec "$NSP-srv" "$PYTHON3" "$HERE/netns_proxy.py" 10.231.0.3 8000 8080 proxy.log 26 &
  pids+=($!)
  up=
  for _ in $(seq 1 100); do
    if on_ns srv curl -sf -o /dev/null http://127.0.0.1:8080/train-000.tar &&
      grep -q listening proxy.log 2>/dev/null; then
      up=1
      break
    fi
    sleep 0.1
  done
  if [[ -z $up ]]; then
    bad "c) nginx and the proxy in the server namespace did not start" "$(tail -n 3 ngx/error.log 2>/dev/null)"
  else
    : >proxy.log
    two_nodes http 10.231.0.1 'http://10.231.0.3:8000/train-{000..003}.tar' --read-timeout 20
    cuts=$(grep -c '^cut' proxy.log || true)
    drops=$(grep -c '^drop' proxy.log || true)
    if ((RC == 0)) && [[ -n $net_sums && $(summary_sums http0.json) == "$net_sums" &&
      $(summary_sums http1.json) == "$net_sums" ]] && ((cuts > 0 && drops > 0)); then
      ok "c) HTTP from a third namespace, 40 ms per connection, $drops connections dropped, $cuts responses cut: the weights of local files on all 4 ranks ($((SECONDS - t)) s)"
    else
      bad "c) HTTP through the lossy proxy" "rc $RC, $cuts cuts, $drops drops; weights $(summary_sums http0.json 2>&1) / $(summary_sums http1.json 2>&1), local $net_sums" "$(tail -n 3 http0.out http1.out)"
    fi
  fi
fi

# --- d) a node killed mid-run ---------------------------------------------------
# kill_node VICTIM: a long job (no --json; log every 10 steps); once node 0
# has logged twice, node VICTIM gets SIGKILL; the other must end within 30 s,
# exit 1, naming the process lost.
kill_node() {
  local victim=$1 other=$((1 - $1)) r p=() i
  for r in 0 1; do
    CUDA_VISIBLE_DEVICES='' ip netns exec "$NSP-n$r" "$TRAIN" "${COMMON[@]}" --epochs 100000 --node-rank "$r" \
      --master-addr 10.231.0.1 --master-port 29700 --train "$SPEC" --log-every 10 \
      >"kill$victim-$r.out" 2>&1 &
    p+=($!)
    pids+=($!)
  done
  for ((i = 0; i < 600; i++)); do
    (($(grep -c '^step' "kill$victim-0.out" 2>/dev/null || true) + 0 >= 2)) && break
    if ! kill -0 "${p[0]}" 2>/dev/null || ! kill -0 "${p[1]}" 2>/dev/null; then break; fi
    sleep 0.1
  done
  local steps
  steps=$(grep '^step' "kill$victim-0.out" | tail -n 1 | cut -d' ' -f2)
  kill -9 "${p[victim]}" 2>/dev/null || true
  local t=$SECONDS rc=0
  for ((i = 0; i < 300; i++)); do
    kill -0 "${p[other]}" 2>/dev/null || break
    sleep 0.1
  done
  local took=$((SECONDS - t))
  if kill -0 "${p[other]}" 2>/dev/null; then
    kill -9 "${p[other]}" 2>/dev/null || true
    wait "${p[other]}" 2>/dev/null || true
    bad "d) node $victim killed: node $other still runs after 30 s" "$(tail -n 3 "kill$victim-$other.out")"
    return
  fi
  wait "${p[other]}" || rc=$?
  wait "${p[victim]}" 2>/dev/null || true
  local msg
  msg=$(grep '^wds-train: ' "kill$victim-$other.out" | tail -n 1)
  if [[ -n $steps ]] && ((rc == 1)) && grep -q "process $victim exited or lost its connection" <<<"$msg"; then
    ok "d) node $victim killed at step ${steps%/*}: node $other stopped in ${took} s (< 30): $msg"
  else
    bad "d) node $victim killed (at step ${steps:-none})" "node $other: exit $rc after $took s: $(tail -n 3 "kill$victim-$other.out")"
  fi
}
kill_node 1
kill_node 0

echo "# $((SECONDS - T0)) s"
echo "$passed passed, $failed failed"
((failed == 0))
