#!/usr/bin/env bash
# Integration test: many machines, simulated. Each node of a job runs in its
# own network namespace, joined to the others by veth links on a bridge (in
# a namespace of its own), so the job's traffic and the data travel over
# real interfaces (10.231.0.1 node 0, .2 node 1, .3 the server;
# tests/integration/lib-netns.sh makes them). The wds-train jobs are
# launched by MPI as on real machines: mpiexec in node 0's namespace, an
# agent that runs `ip netns exec` where the launcher would run ssh, TCP on
# eth0 only (lib-netns.sh says how shared memory is kept out):
#
#   a) mpiexec, one wds-train process of two CPU ranks on each node:
#      identical weights on all 4 ranks after every step, bit for bit the
#      weights of the same job over loopback (mpiexec -n 2 here: one
#      process of 4 ranks reads another split of the data, see
#      on_loopback), and the traffic went through node 1's eth0;
#   b) `torchrun --nnodes 2` (one process per node) and examples/
#      train_ddp.py, gloo on eth0: equal steps and weights on both ranks
#      (needs torch: the python of BUILD/py-venv, as python_ddp uses, or
#      WDS_NETNS_TORCH_PYTHON; skipped, saying so, without it);
#   c) mpiexec, one CPU rank on each node, the shards served over HTTP from
#      a third namespace (nginx) through netns_proxy.py, which adds latency
#      and drops and cuts connections (seeded; this kernel has no netem
#      qdisc): bit for bit the weights of the same job over loopback
#      reading local files (skipped, saying so, without nginx or libcurl);
#   d) a node's process killed (SIGKILL) mid-run, node 1's and then node
#      0's: mpiexec ends the job within 30 s, failing, naming the process.
#
# a), c) and d) use the MPI wds-train was built with (MPIEXEC: Open MPI's
# mpirun or MPICH's mpiexec; skipped, saying so, in a build without MPI).
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN) and iproute2's `ip`: skips
# (77) saying why where namespaces or veth links cannot be made. Every
# namespace and process it made is removed on every exit path.
#
# Usage: netns.sh WDS_TRAIN_BINARY WDS_BINARY BUILD_DIR [MPIEXEC]
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup netns "timeout" "$@"
TRAIN=$WDS
WDS_CLI=${2:?usage: netns.sh WDS_TRAIN WDS BUILD_DIR}
BUILD=${3:?usage: netns.sh WDS_TRAIN WDS BUILD_DIR [MPIEXEC]}
MPIEXEC=${4:-}
ROOT=$(cd "$HERE/../.." && pwd)
T0=$SECONDS

skip() {
  echo "SKIP: $*"
  exit 77
}
((EUID == 0)) || skip "not root: network namespaces and veth links need CAP_SYS_ADMIN and CAP_NET_ADMIN"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (apt-get install iproute2)"

NSP=wdsnet$$ # namespaces: $NSP-br (the bridge), -n0, -n1, -srv
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  netns_down
  wds_test_cleanup
}
source "$HERE/lib-netns.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# --- the network ------------------------------------------------------------
netns_up "$NSP" || skip "$NETNS_ERR"
ADDR=("${NETNS_ADDR[@]}")
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
# The trainer tests' shards (train_shards.py): 16x16 gray PNGs, 10 classes, 4 shards of 250.
"$PYTHON3" "$HERE/train_shards.py" . train 250,250,250,250 1 || die "generating shards (python3 with Pillow)"
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
  --batch-size 8 --epochs 2 --collective-timeout 60)
unset RANK WORLD_SIZE LOCAL_RANK NNODES NODE_RANK SLURM_PROCID SLURM_NTASKS

# The MPI launch across the namespaces (MPI_NET), and a wrapper each
# process runs: it records its pid (pid.RANK, for d), then becomes
# wds-train with a --json log of its own when JSON is set.
MPI_NET=()
if [[ -z $MPIEXEC ]]; then
  NO_MPI="wds-train was built without MPI (WDS_WITH_MPI; apt-get install libopenmpi-dev openmpi-bin)"
elif ! netns_mpi "$MPIEXEC" "$PWD"; then
  NO_MPI=$NETNS_ERR
else
  NO_MPI=
  echo "# MPI across the namespaces: ${MPI_NET[*]}"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # Open MPI as root
cat >wrap.sh <<'SH'
#!/usr/bin/env bash
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}
echo $$ >"pid.$r"
[ -n "${JSON:-}" ] && exec "$@" --json "$JSON$r.json"
exec "$@"
SH
chmod +x wrap.sh
# on_nodes OUT SPEC [ARGS]: one wds-train process per node, launched by
# MPI_NET from node 0's namespace, logs in OUT.out and OUT<rank>.json; RC
# is mpiexec's status.
on_nodes() {
  local out=$1 spec=$2
  shift 2
  RC=0
  JSON=$out CUDA_VISIBLE_DEVICES='' timeout 180 "${MPI_NET[@]}" -n 2 "$PWD/wrap.sh" "$TRAIN" \
    "${COMMON[@]}" --train "$spec" --log-every 1 --log-checksums "$@" >"$out.out" 2>&1 || RC=$?
}
# on_loopback OUT RANKS: the same job here, one process per "node" over
# loopback (mpiexec -n 2, local files), --ranks RANKS each: the reference
# (one job of several processes sums its gradients in global rank order,
# so the network between them cannot change a bit; one process of all the
# ranks would read another split of the data, its loader being rank 0 of 1
# rather than rank p of 2). Its final weights in $REF.
on_loopback() {
  local over=()
  "$MPIEXEC" --version 2>&1 | grep -qE 'Open MPI|OpenRTE' && over=(--oversubscribe)
  RC=0
  JSON=$1 CUDA_VISIBLE_DEVICES='' timeout 180 "$MPIEXEC" -n 2 "${over[@]}" "$PWD/wrap.sh" "$TRAIN" \
    "${COMMON[@]}" --ranks "$2" --train "$SPEC" >"$1.out" 2>&1 || RC=$?
  REF=
  ((RC != 0)) || [[ ! -s ${1}0.json ]] || REF=$(summary_sums "${1}0.json")
}

# --- a) two nodes, one wds-train process of 2 CPU ranks each, over veth ------
if [[ -n $NO_MPI ]]; then
  echo "skip a) 2 nodes x 2 CPU ranks under MPI: $NO_MPI"
else
  t=$SECONDS
  on_loopback lo4 2
  if ((RC != 0)) || [[ -z $REF ]]; then
    bad "a) the reference: the same job over loopback" "rc $RC" "$(tail -n 3 lo4.out)"
  else
    tx0=$(netns_tx 1)
    on_nodes net "$SPEC" --ranks 2
    tx=$(($(netns_tx 1) - tx0))
    if ((RC == 0)) && [[ -s net0.json && -s net1.json ]] &&
      json_check net0.json "len(steps) == summary['steps'] == 64 and all(len(s['weights_checksum']) == 4 and len(set(s['weights_checksum'])) == 1 for s in steps)" &&
      [[ $(summary_sums net0.json) == "$REF" && $(summary_sums net1.json) == "$REF" ]] &&
      grep -q 'in process 0 of 2' net.out && ((tx > 1000000)); then
      ok "a) 2 nodes x 2 CPU ranks under MPI over veth: identical weights on all 4 ranks after each of 64 steps, bit for bit the same job's over loopback (${REF:2:16}...), node 1 sent $((tx / 1024)) KiB on eth0 ($((SECONDS - t)) s)"
    else
      bad "a) 2 nodes x 2 CPU ranks under MPI over veth" "rc $RC, node 1 sent $tx bytes; weights $(summary_sums net0.json 2>&1) / $(summary_sums net1.json 2>&1), over loopback $REF" "$(tail -n 5 net.out)"
    fi
  fi
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
if [[ -n $NO_MPI ]]; then
  echo "skip c) HTTP through a lossy proxy under MPI: $NO_MPI"
elif ! nginx_find; then
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
    on_loopback lo2 1
    local_sums=$REF
    : >proxy.log
    on_nodes http 'http://10.231.0.3:8000/train-{000..003}.tar' --ranks 1 --read-timeout 20
    cuts=$(grep -c '^cut' proxy.log || true)
    drops=$(grep -c '^drop' proxy.log || true)
    if ((RC == 0)) && [[ -n $local_sums && -s http0.json && -s http1.json &&
      $(summary_sums http0.json) == "$local_sums" && $(summary_sums http1.json) == "$local_sums" ]] &&
      json_check http0.json "len(steps) == summary['steps'] > 0 and all(len(s['weights_checksum']) == 2 and len(set(s['weights_checksum'])) == 1 for s in steps)" &&
      ((cuts > 0 && drops > 0)); then
      ok "c) 2 nodes x 1 CPU rank under MPI, HTTP from a third namespace, 40 ms per connection, $drops connections dropped, $cuts responses cut: bit for bit the same job's over loopback on local files (${local_sums:2:16}...) ($((SECONDS - t)) s)"
    else
      bad "c) HTTP through the lossy proxy under MPI" "rc $RC, $cuts cuts, $drops drops; weights $(summary_sums http0.json 2>&1) / $(summary_sums http1.json 2>&1), over loopback on local files $local_sums" "$(tail -n 5 http.out)"
    fi
  fi
fi

# --- d) a node killed mid-run ---------------------------------------------------
# kill_node VICTIM: a long job under MPI (no --json; log every 10 steps);
# once it has logged twice, node VICTIM's wds-train gets SIGKILL; mpiexec
# must end within 30 s, failing, and name the process (Open MPI: "process
# rank N"; MPICH: the host, "RUNNING AT 10.231.0.N").
kill_node() {
  local victim=$1 i job name=kill$1
  rm -f pid.*
  CUDA_VISIBLE_DEVICES='' timeout 180 "${MPI_NET[@]}" -n 2 "$PWD/wrap.sh" "$TRAIN" "${COMMON[@]}" \
    --epochs 100000 --ranks 1 --train "$SPEC" --log-every 10 >"$name.out" 2>&1 &
  job=$!
  pids+=($!)
  for ((i = 0; i < 600; i++)); do
    [[ -s pid.$victim ]] && (($(grep -c '^step' "$name.out" 2>/dev/null || true) + 0 >= 2)) && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  local steps pid
  steps=$(grep '^step' "$name.out" | tail -n 1 | cut -d' ' -f2)
  pid=$(cat "pid.$victim" 2>/dev/null || true)
  [[ -n $pid ]] && kill -9 "$pid" 2>/dev/null || true
  local t=$SECONDS rc=0
  for ((i = 0; i < 300; i++)); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  local took=$((SECONDS - t))
  if kill -0 "$job" 2>/dev/null; then
    kill -9 "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
    bad "d) node $victim's process killed: the job still runs after 30 s" "$(tail -n 3 "$name.out")"
    return
  fi
  wait "$job" || rc=$?
  local msg
  msg=$(grep -m 1 -E "process rank $victim |RUNNING AT ${ADDR[victim]}" "$name.out" || true)
  if [[ -n $pid && -n $steps && -n $msg ]] && ((rc != 0 && rc != 124)); then
    ok "d) node $victim's process killed at step ${steps%/*}: the job ended in ${took} s (< 30), exit $rc: $(sed 's/^ *//' <<<"$msg")"
  else
    bad "d) node $victim's process killed (pid ${pid:-none}, at step ${steps:-none})" "exit $rc after $took s" "$(tail -n 8 "$name.out")"
  fi
}
if [[ -n $NO_MPI ]]; then
  echo "skip d) a node killed mid-run under MPI: $NO_MPI"
else
  kill_node 1
  kill_node 0
fi

echo "# $((SECONDS - T0)) s"
echo "$passed passed, $failed failed"
((failed == 0))
