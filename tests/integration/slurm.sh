#!/usr/bin/env bash
# Integration test: wds-train launched by Slurm's srun (issue 36), on a
# single-machine Slurm this test starts and stops itself: a slurm.conf of
# one node (this host, 2 CPUs), munged, slurmctld and slurmd with their
# state, spool, sockets and logs in the test's temporary directory, on
# ports of their own. Then
#
#   srun --mpi=pmix -n 2 wds-train ... (MPICH: --mpi=pmi2, which its
#   Hydra-less PMI client speaks; Open MPI 4.1 speaks PMIx): one job of 2
#   CPU ranks, identical weights on both after every step, bit for bit
#   those of the same job under mpiexec -n 2 (one process of 2 ranks would
#   read another split of the data: its loader is rank 0 of 1);
#   sbatch --wait of a batch script as docs/wds-train.md gives it (srun in
#   the script), on the CPU: the same weights.
#
# Needs root (the daemons run as root, SlurmUser=root) and Debian's
# slurmctld, slurmd, slurm-client and munge: skips (77) saying why without
# them. Every daemon and job step it started is ended on every exit path
# (trap): the daemons by their pids, the job steps (slurmstepd, which leave
# slurmd's process tree) and tasks found by a variable only this run's
# daemons and srun carry; and each daemon runs under `timeout`, so that
# even a test killed without its trap leaves none behind for long.
#
# Usage: slurm.sh WDS_TRAIN_BINARY MPIEXEC
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
train=$1
mpiexec=${2:?usage: slurm.sh WDS_TRAIN MPIEXEC}
wds_test_setup slurm "timeout" "$train"
TRAIN=$WDS
T0=$SECONDS

skip() {
  echo "SKIP: $*"
  exit 77
}
((EUID == 0)) || skip "not root: this test runs slurmctld and slurmd as root (SlurmUser=root)"
for tool in slurmctld slurmd srun sbatch sinfo munged mungekey; do
  command -v "$tool" >/dev/null 2>&1 ||
    skip "no $tool (apt-get install slurmctld slurmd slurm-client munge)"
done
version=$("$mpiexec" --version 2>&1 || true)
if [[ $version == *"Open MPI"* || $version == *OpenRTE* ]]; then
  plugin=pmix
elif [[ $version == *HYDRA* ]]; then
  plugin=pmi2
else
  skip "$mpiexec is neither Open MPI's nor MPICH's: which srun --mpi plugin fits is unknown"
fi

# --- the daemons ---------------------------------------------------------------
MARK=WDS_SLURM_TEST_$$ # in the daemons' environment, so in their job steps'
daemons=()
cleanup() {
  local p e
  # the daemons first, politely (slurmd ends its job steps), then whatever
  # of this run is left: job steps (slurmstepd) and their tasks
  for p in "${daemons[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${daemons[@]}"; do
    for _ in $(seq 1 50); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1
    done
  done
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}
    p=${p%/environ}
    ((p != $$)) || continue
    grep -qz "^$MARK=1$" "$e" 2>/dev/null && kill -9 "$p" 2>/dev/null
  done
  for p in "${daemons[@]}"; do wait "$p" 2>/dev/null || true; done
  wds_test_cleanup
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# munged wants its socket's directories open to all (x) and its key in a
# directory of root's alone
chmod 755 .
mkdir -m 755 munge
mkdir -m 700 munge/key.d ctld spool
out=$(mungekey -c -k munge/key.d/key 2>&1) || skip "mungekey -c failed: $out"
# Every daemon runs in the foreground under `timeout $LIFE`: should this
# test be killed where no trap runs (ctest's timeout), they end themselves.
LIFE=170
env "$MARK=1" timeout "$LIFE" munged -F -S "$PWD/munge/socket" --key-file munge/key.d/key \
  --pid-file "$PWD/munge/pid" --log-file "$PWD/munge/log" --seed-file "$PWD/munge/seed" \
  >munge/out 2>&1 &
daemons+=($!)
for _ in $(seq 1 50); do
  [[ -S munge/socket ]] && break
  kill -0 "${daemons[0]}" 2>/dev/null || break
  sleep 0.1
done
[[ -S munge/socket ]] || skip "munged does not start: $(tail -n 2 munge/out munge/log 2>/dev/null | tr '\n' ' ')"
host=$(hostname -s)
cpus=2
start_slurm() {
  local port=$((10000 + RANDOM % 20000))
  cat >slurm.conf <<CONF
ClusterName=wdstest$$
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$PWD/munge/socket
StateSaveLocation=$PWD/ctld
SlurmdSpoolDir=$PWD/spool
SlurmctldPidFile=$PWD/ctld.pid
SlurmdPidFile=$PWD/slurmd.pid
SlurmctldLogFile=$PWD/slurmctld.log
SlurmdLogFile=$PWD/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=wds Nodes=$host Default=YES MaxTime=10 State=UP
CONF
  env "$MARK=1" timeout "$LIFE" slurmctld -D -f "$PWD/slurm.conf" >slurmctld.out 2>&1 &
  daemons+=($!)
  env "$MARK=1" timeout "$LIFE" slurmd -D -N "$host" -f "$PWD/slurm.conf" >slurmd.out 2>&1 &
  daemons+=($!)
}
export SLURM_CONF=$PWD/slurm.conf
up=
for try in 1 2 3; do
  start_slurm
  for _ in $(seq 1 100); do
    [[ $(sinfo -h -o %t 2>/dev/null) == idle ]] && up=1 && break
    kill -0 "${daemons[-2]}" 2>/dev/null && kill -0 "${daemons[-1]}" 2>/dev/null || break
    sleep 0.2
  done
  [[ -n $up ]] && break
  # a port another process took: the daemons exit; try others
  grep -qi "address already in use" slurmctld.out slurmctld.log slurmd.out slurmd.log 2>/dev/null || break
  echo "# a port was taken (try $try): others"
  kill -TERM "${daemons[-2]}" "${daemons[-1]}" 2>/dev/null || true
  wait "${daemons[-2]}" "${daemons[-1]}" 2>/dev/null || true
done
[[ -n $up ]] || skip "slurmctld and slurmd did not bring the node up in 20 s: $(tail -n 3 slurmctld.out slurmctld.log slurmd.out slurmd.log 2>/dev/null | tr '\n' ' ')"
mpis=$(srun --mpi=list 2>&1 || true)
grep -qw "$plugin" <<<"$mpis" || skip "srun --mpi=list has no $plugin: $(tr '\n' ' ' <<<"$mpis")"
echo "# slurmctld and slurmd up ($((SECONDS - T0)) s); srun --mpi=$plugin"

# --- the job -------------------------------------------------------------------
"$PYTHON3" "$HERE/train_shards.py" . train 250,250,250,250 1 || die "generating shards (python3 with Pillow)"
# shellcheck disable=SC2054  # --hidden 64,32 is one argument
COMMON=(--device cpu --image-size 16 --channels 1 --hidden 64,32 --lr 0.05 --seed 7
  --train "$PWD/train-{000..003}.tar" --batch-size 8 --epochs 1 --log-every 1
  --log-checksums --collective-timeout 60)
unset RANK WORLD_SIZE LOCAL_RANK NNODES NODE_RANK
final() {
  "$PYTHON3" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["summary"]["weights_checksum"])' "$1"
}
# one_job NAME: NAME0.json and NAME1.json are one job's of 2 ranks (every
# step's checksums 2 and equal; the same final weights in both logs), not
# two jobs of one rank each.
one_job() {
  [[ -s ${1}0.json && -s ${1}1.json ]] && "$PYTHON3" - "${1}0.json" <<'PY' &&
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "weights_checksum" in l and "summary" not in l]
sys.exit(0 if len(steps) == lines[-1]["summary"]["steps"] > 0 and all(
    len(s["weights_checksum"]) == 2 and len(set(s["weights_checksum"])) == 1 for s in steps) else 1)
PY
    [[ $(final "${1}0.json") == "$(final "${1}1.json")" ]]
}
cat >wrap.sh <<'SH'
#!/usr/bin/env bash
exec "$@" --json "$JSON${SLURM_PROCID:-${OMPI_COMM_WORLD_RANK:-$PMI_RANK}}.json"
SH
chmod +x wrap.sh

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 # Open MPI as root
over=()
[[ $plugin != pmix ]] || over=(--oversubscribe)
rc=0
JSON=mpi CUDA_VISIBLE_DEVICES='' timeout 120 "$mpiexec" -n 2 "${over[@]}" ./wrap.sh "$TRAIN" \
  "${COMMON[@]}" --ranks 1 >mpi.out 2>&1 || rc=$?
((rc == 0)) && one_job mpi || die "the reference, $mpiexec -n 2: not one job of 2 ranks: rc $rc: $(tail -n 3 mpi.out)"
one=$(final mpi0.json)

t=$SECONDS
rc=0
JSON=srun CUDA_VISIBLE_DEVICES='' timeout 120 env "$MARK=1" srun --mpi="$plugin" -n 2 -N 1 --chdir "$PWD" ./wrap.sh \
  "$TRAIN" "${COMMON[@]}" --ranks 1 >srun.out 2>&1 || rc=$?
if ((rc == 0)) && one_job srun &&
  [[ $(final srun0.json) == "$one" && $(final srun1.json) == "$one" ]] &&
  grep -q 'in process 0 of 2' srun.out; then
  ok "srun --mpi=$plugin -n 2: one job of 2 ranks, identical weights after each step, bit for bit those of $(basename "$mpiexec") -n 2 (${one:2:16}...) ($((SECONDS - t)) s)"
else
  bad "srun --mpi=$plugin -n 2 wds-train" "rc $rc; weights $(final srun0.json 2>&1) / $(final srun1.json 2>&1), mpiexec -n 2 $one" \
    "$(tail -n 8 srun.out)"
fi

# The batch script of docs/wds-train.md, on the CPU: sbatch --wait.
{
  echo '#!/bin/bash'
  echo "#SBATCH --nodes=1 --ntasks=2 --output=$PWD/sbatch.out"
  printf '%q ' srun --mpi="$plugin" ./wrap.sh "$TRAIN" "${COMMON[@]}" --ranks 1
  echo
} >train.sbatch
t=$SECONDS
rc=0
JSON=sbatch CUDA_VISIBLE_DEVICES='' timeout 120 env "$MARK=1" sbatch --wait --chdir "$PWD" \
  train.sbatch >sbatch.submit 2>&1 || rc=$?
if ((rc == 0)) && one_job sbatch && [[ $(final sbatch0.json) == "$one" ]]; then
  ok "sbatch --wait of a script running srun --mpi=$plugin (docs/wds-train.md's): one job of 2 ranks, the same weights ($((SECONDS - t)) s)"
else
  bad "sbatch of srun --mpi=$plugin wds-train" "rc $rc; weights $(final sbatch0.json 2>&1) / $(final sbatch1.json 2>&1), mpiexec -n 2 $one" \
    "$(tail -n 3 sbatch.submit)" "$(tail -n 8 sbatch.out 2>/dev/null)"
fi

echo "# $((SECONDS - T0)) s"
echo "$passed passed, $failed failed"
((failed == 0))
