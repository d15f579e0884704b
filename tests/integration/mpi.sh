#!/usr/bin/env bash
# Tool test: `wds-train` launched by mpirun (issue 36), CPU backend, on
# generated shards (16x16 gray PNGs, 10 classes, as train.sh makes them).
#
#   * mpirun -np 2 (2 rank threads each), -np 4 (oversubscribed on small
#     machines) and -np 2 of one rank each: one job, the same weights on
#     every rank after every step, and bit for bit the weights of the same
#     job summed by the reference (WDS_TRAIN_MPI_SUM=star: every buffer
#     gathered at process 0, summed there in global rank order, sent back,
#     as the retired rendezvous' star sum did). The data a rank reads
#     depends on the processes (one loader per process), so one process of
#     as many rank threads reads other rows: the reference runs the same
#     processes;
#   * a process killed (SIGKILL) mid-run ends the job within seconds;
#   * a process stopped (SIGSTOP) ends the job after --collective-timeout,
#     the others' watchdog naming the timeout.
#
# Usage: mpi.sh WDS_TRAIN_BINARY MPIEXEC [MPIEXEC_FLAGS...]
# (Open MPI as root needs OMPI_ALLOW_RUN_AS_ROOT=1 and
# OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, which ctest sets; -np 4 on fewer cores
# needs --oversubscribe, given as a flag.)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SHARDGEN=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/train_shards.py # the trainer tests' shards
train=$1
mpiexec=$2
shift 2
mpiflags=("$@")
wds_test_setup mpi "timeout" "$train"
TRAIN=$WDS

"$PYTHON3" "$SHARDGEN" . train 250,250,250,250 1 || die "generating shards (python3 with Pillow)"

COMMON=(--device cpu --image-size 16 --channels 1 --hidden 64,32 --lr 0.05 --seed 7
  --train 'train-{000..003}.tar' --batch-size 8 --epochs 1 --log-every 1 --log-checksums)
unset RANK WORLD_SIZE LOCAL_RANK NNODES NODE_RANK SLURM_PROCID SLURM_NTASKS

# A wrapper that records each process's pid, then becomes wds-train, with a
# --json log of its own when JSON is set (every process gets the same
# options, and process 0's log is the job's).
cat >wrap.sh <<'SH'
#!/usr/bin/env bash
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}
echo $$ >"pid.$r"
[ -n "${JSON:-}" ] && exec "$@" --json "$JSON$r.json"
# OTHER_LR: process 1 started with another --lr than the others.
[ -n "${OTHER_LR:-}" ] && [ "$r" = 1 ] && exec "$@" --lr "$OTHER_LR"
exec "$@"
SH
chmod +x wrap.sh

# The final checksums of a JSON log (one per rank), as text.
final() {
  "$PYTHON3" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readlines()[-1])["summary"]["weights_checksum"])' "$1"
}
# Every step's checksums the same on all WORLD ranks.
same_every_step() {
  "$PYTHON3" - "$1" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [l for l in lines if "weights_checksum" in l and "summary" not in l]
summary = lines[-1]["summary"]
ok = len(steps) == summary["steps"] > 0 and all(
    len(s["weights_checksum"]) == int(sys.argv[2]) and len(set(s["weights_checksum"])) == 1 for s in steps)
sys.exit(0 if ok else 1)
PY
}

# mpi_vs NAME NP WORLD: mpirun -np NP against the same job summed by the
# reference (extra: wds-train's options).
mpi_vs() {
  local name=$1 np=$2 world=$3 rc=0
  JSON=$name timeout 120 "$mpiexec" -np "$np" "${mpiflags[@]}" ./wrap.sh \
    "$TRAIN" "${COMMON[@]}" "${extra[@]}" >"$name.out" 2>&1 || rc=$?
  if ((rc != 0)) || ! same_every_step "${name}0.json" "$world" ||
    [ "$(final "${name}0.json")" != "$(final "$name$((np - 1)).json")" ]; then
    bad "$name: mpirun -np $np" "rc $rc: $(tail -n 5 "$name.out")"
    return
  fi
  rc=0
  WDS_TRAIN_MPI_SUM=star JSON=${name}_star timeout 120 "$mpiexec" -np "$np" \
    "${mpiflags[@]}" ./wrap.sh "$TRAIN" "${COMMON[@]}" "${extra[@]}" \
    >"${name}_star.out" 2>&1 || rc=$?
  if ((rc != 0)); then
    bad "$name: the reference sum's run" "rc $rc: $(tail -n 3 "${name}_star.out")"
    return
  fi
  local a b
  a=$(final "${name}0.json")
  b=$(final "${name}_star0.json")
  if [ "$a" = "$b" ] && grep -q "in process 0 of $np" "$name.out"; then
    ok "$name: one job of $world ranks, identical weights after each step, = the reference (star) sum's bit for bit ($a)"
  else
    bad "$name: weights differ from the reference (star) sum's" "slices: $a" "star: $b"
  fi
}

extra=(--ranks 2)
mpi_vs np2_ranks2 2 4
extra=(--ranks 1)
mpi_vs np4 4 4
mpi_vs np2_ranks1 2 2

# long_run NAME SIGNAL [ARGS]: a long mpirun -np 2; once it logs a step,
# process 1 gets SIGNAL; seconds until mpirun ended in $took, status $rc.
long_run() {
  local name=$1 sig=$2 i
  shift 2
  rm -f pid.*
  timeout 120 "$mpiexec" -np 2 "${mpiflags[@]}" ./wrap.sh "$TRAIN" "${COMMON[@]}" \
    --epochs 100000 --log-every 10 --ranks 1 "$@" >"$name.out" 2>&1 &
  local job=$!
  for ((i = 0; i < 300; i++)); do
    [ -s pid.1 ] && grep -q '^step' "$name.out" && break
    sleep 0.1
  done
  local start=$SECONDS victim
  victim=$(cat pid.1 2>/dev/null || echo)
  [ -n "$victim" ] && kill "-$sig" "$victim"
  rc=0
  wait "$job" || rc=$?
  took=$((SECONDS - start))
  [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null || true
}

# A process started with other options: the configuration fingerprints,
# gathered over MPI, differ; the job stops at its start, naming the rank.
rc=0
OTHER_LR=0.1 timeout 120 "$mpiexec" -np 2 "${mpiflags[@]}" ./wrap.sh "$TRAIN" \
  "${COMMON[@]}" >other.out 2>&1 || rc=$?
if ((rc != 0 && rc != 124)) && grep -q 'rank 1 was started with other options than rank 0' other.out &&
  ! grep -q '^step' other.out; then
  ok "a process with other options is refused: $(grep -m1 'other options' other.out)"
else
  bad "a process with other options" "rc $rc" "$(tail -n 5 other.out)"
fi

long_run kill KILL
if ((rc != 0 && rc != 124 && took <= 15)); then
  ok "a killed process ends the job in ${took} s (rc $rc): $(grep -m1 -i 'exited\|signal\|abort' kill.out || true)"
else
  bad "a killed process ends the job" "rc $rc after ${took} s" "$(tail -n 5 kill.out)"
fi

long_run stop STOP --collective-timeout 3
if ((rc != 0 && rc != 124 && took >= 3 && took <= 30)) &&
  grep -q 'a collective waited 3 s (--collective-timeout)' stop.out; then
  ok "a stopped process ends the job after the collective timeout (${took} s): $(grep -m1 'collective waited' stop.out)"
else
  bad "a stopped process ends the job after --collective-timeout" "rc $rc after ${took} s" "$(tail -n 5 stop.out)"
fi

echo "$passed passed, $failed failed"
((failed == 0))
