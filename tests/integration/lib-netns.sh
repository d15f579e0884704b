# shellcheck shell=bash disable=SC2034,SC2054  # sets variables for its callers; --host a,b
# lib-netns.sh — "machines" in network namespaces, and an MPI launch across
# them (sourced by tests/integration/netns.sh and
# scripts/bench-allreduce.sh; needs root and iproute2).
#
#   netns_up PREFIX           namespaces PREFIX-br (a bridge), PREFIX-n0
#                             (10.231.0.1), PREFIX-n1 (10.231.0.2) and
#                             PREFIX-srv (10.231.0.3), each with eth0 on the
#                             bridge and lo up; NETNS_ADDR holds the three
#                             addresses, NETNS_LIST the namespaces made (for
#                             netns_down). Returns 1 with NETNS_ERR set when
#                             a namespace, bridge or veth link cannot be made.
#   netns_down                every process in those namespaces killed, the
#                             namespaces removed (safe to call twice).
#   netns_tx NODE             the bytes node NODE (0, 1) sent on its eth0.
#   netns_mpi MPIEXEC DIR [K] MPI_NET: the command that starts an MPI job of
#                             K processes per node (default 1; ranks 0..K-1
#                             on node 0, then node 1's), run in
#                             node 0's namespace: mpiexec, an agent in DIR
#                             that runs `ip netns exec PREFIX-nK` where the
#                             launcher would run ssh, the nodes named by
#                             their veth addresses, and TCP on eth0 only.
#                             Append -np N (Open MPI) / -n N (MPICH) args.
#                             Returns 1, NETNS_ERR set, for an unknown MPI.
#
# Shared memory between the "nodes": network namespaces share one file
# system, /dev/shm included, and the hostname. Open MPI 4.1 decides which
# processes share a node (MPI_COMM_TYPE_SHARED, vader) by hostname: with one
# hostname for both namespaces, 2 processes per node crashed in
# MPI_Comm_split (ob1, segfault). So every process of the job (mpiexec and
# the launched daemons) runs in a UTS namespace of its own too (`unshare
# --uts`), named wds-node0 / wds-node1. And UCX (Open MPI's pml ucx,
# MPICH's ch4:ucx device) finds peers on "the same host" by boot id, which
# the namespaces share: Open MPI gets `--mca pml ob1 --mca btl
# tcp,vader,self` (no UCX; vader only between processes of one node), MPICH
# `UCX_TLS=tcp` (UCX over TCP only; MPICH's own shared memory is for the
# ranks of one node). The tests check the traffic went through eth0
# (netns_tx).

NETNS_ADDR=(10.231.0.1 10.231.0.2 10.231.0.3)
NETNS_LIST=()
NETNS_PREFIX=

netns_up() {
  NETNS_PREFIX=$1
  local n ns i out nodes=(n0 n1 srv)
  NETNS_ERR=
  for n in br "${nodes[@]}"; do
    out=$(ip netns add "$NETNS_PREFIX-$n" 2>&1) || {
      NETNS_ERR="ip netns add failed: $out"
      return 1
    }
    NETNS_LIST+=("$NETNS_PREFIX-$n")
  done
  out=$(ip -n "$NETNS_PREFIX-br" link add br0 type bridge stp_state 0 forward_delay 0 2>&1) || {
    NETNS_ERR="no bridge: $out"
    return 1
  }
  ip -n "$NETNS_PREFIX-br" link set lo up
  ip -n "$NETNS_PREFIX-br" link set br0 up
  for i in 0 1 2; do
    ns=$NETNS_PREFIX-${nodes[i]}
    out=$(ip link add name eth0 netns "$ns" type veth peer name "p$i" netns "$NETNS_PREFIX-br" 2>&1) || {
      NETNS_ERR="no veth links: $out"
      return 1
    }
    ip -n "$NETNS_PREFIX-br" link set "p$i" master br0
    ip -n "$NETNS_PREFIX-br" link set "p$i" up
    ip -n "$ns" addr add "${NETNS_ADDR[i]}/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
}

netns_down() {
  local ns p
  for ns in "${NETNS_LIST[@]}"; do
    # anything still running in our namespaces was started by us
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  NETNS_LIST=()
}

# netns_tx NODE: bytes node NODE (0, 1) sent on its eth0.
netns_tx() { ip netns exec "$NETNS_PREFIX-n$1" cat /sys/class/net/eth0/statistics/tx_bytes; }

netns_mpi() {
  local mpiexec=$1 dir=$2 k=${3:-1}
  NETNS_ERR=
  # The agent: [ssh options] HOST COMMAND... -> COMMAND run by sh (as sshd
  # would) in the namespace whose eth0 has HOST's address, under the node's
  # own hostname.
  cat >"$dir/netns-agent.sh" <<SH
#!/usr/bin/env bash
while [[ \$1 == -* ]]; do shift; done
case \$1 in
${NETNS_ADDR[0]}) n=0 ;;
${NETNS_ADDR[1]}) n=1 ;;
*) echo "netns-agent: unknown host \$1" >&2; exit 255 ;;
esac
shift
exec ip netns exec "$NETNS_PREFIX-n\$n" unshare --uts /bin/sh -c "hostname wds-node\$n && \$*"
SH
  printf '#!/bin/sh\nhostname wds-node0 && exec "$@"\n' >"$dir/netns-node0.sh"
  chmod +x "$dir/netns-agent.sh" "$dir/netns-node0.sh"
  local hosts=${NETNS_ADDR[0]}:$k,${NETNS_ADDR[1]}:$k version
  version=$("$mpiexec" --version 2>&1 || true)
  if [[ $version == *"Open MPI"* || $version == *OpenRTE* ]]; then
    MPI_NET=(ip netns exec "$NETNS_PREFIX-n0" unshare --uts "$dir/netns-node0.sh" "$mpiexec" --mca plm_rsh_agent "$dir/netns-agent.sh"
      --host "$hosts" --mca pml ob1 --mca btl tcp,vader,self --mca btl_tcp_if_include eth0
      --mca oob_tcp_if_include eth0)
  elif [[ $version == *HYDRA* ]]; then
    MPI_NET=(env UCX_TLS=tcp ip netns exec "$NETNS_PREFIX-n0" unshare --uts "$dir/netns-node0.sh" "$mpiexec" -launcher ssh
      -launcher-exec "$dir/netns-agent.sh" -hosts "$hosts" -iface eth0)
  else
    NETNS_ERR="$mpiexec is neither Open MPI's nor MPICH's (Hydra) mpiexec: $(head -n 1 <<<"$version")"
    return 1
  fi
}
