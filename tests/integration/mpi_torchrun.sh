#!/usr/bin/env bash
# Tool test: torchrun inside an mpirun (or srun) task (issue 36). torchrun's
# children inherit the task's OMPI_COMM_WORLD_*, PMI_* and PMIX_RANK, which
# describe torchrun's agent, not them: with torchrun's variables present
# (RANK, WORLD_SIZE, LOCAL_RANK, TORCHELASTIC_RUN_ID) wds-train takes
# torchrun's path and never calls MPI_Init (each child calling it under the
# one MPI identity hangs). mpirun -np 1 starts a script that plays
# torchrun's agent:
#   * two children, RANK=0 and 1 of WORLD_SIZE=2, --device cpu: torchrun's
#     path, which refuses CPU ranks across processes without MPI, at once
#     (before: both hung in MPI_Init);
#   * without mpirun, one child (RANK=0 of WORLD_SIZE=1) in an environment
#     faked as process 1 of 2 of an MPI task: trains alone, no MPI_Init.
# Each run under `timeout`: a hang fails the test, never the suite.
#
# Usage: mpi_torchrun.sh WDS_TRAIN_BINARY MPIEXEC [MPIEXEC_FLAGS...]
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
train=$1
mpiexec=$2
shift 2
mpiflags=("$@")
wds_test_setup mpi_torchrun "timeout" "$train"
TRAIN=$WDS
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE TORCHELASTIC_RUN_ID \
  MASTER_ADDR MASTER_PORT NCCL_COMM_ID SLURM_PROCID SLURM_NTASKS

cat >gen.py <<'PY'
import io, random, tarfile
from PIL import Image
rng = random.Random(1)
with tarfile.open("train-000.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
    for k in range(40):
        im = Image.new("L", (16, 16)); im.putdata([rng.randrange(256) for _ in range(256)])
        b = io.BytesIO(); im.save(b, "PNG")
        for ext, d in (("png", b.getvalue()), ("cls", str(k % 10).encode())):
            ti = tarfile.TarInfo(f"s_{k:06d}.{ext}"); ti.size = len(d); tf.addfile(ti, io.BytesIO(d))
PY
"$PYTHON3" gen.py || die "generating shards (python3 with Pillow)"

# The agent: starts N children with torchrun's variables, waits for them,
# each child's status in status.RANK.
cat >agent.sh <<'SH'
#!/usr/bin/env bash
n=$1
shift
for ((r = 0; r < n; r++)); do
  (RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n \
    TORCHELASTIC_RUN_ID=test MASTER_ADDR=127.0.0.1 MASTER_PORT=29800 \
    "$@" >"child.$r" 2>&1
  echo $? >"status.$r") &
done
wait
SH
chmod +x agent.sh

A=(--device cpu --image-size 16 --channels 1 --hidden 8 --train train-000.tar
  --batch-size 5 --epochs 1 --log-every 100)

rc=0
timeout 60 "$mpiexec" -np 1 "${mpiflags[@]}" ./agent.sh 2 "$TRAIN" "${A[@]}" \
  >two.out 2>&1 || rc=$?
if ((rc == 0)) && [ "$(cat status.0 status.1 2>/dev/null)" = "$(printf '2\n2')" ] &&
  grep -q 'CPU ranks across processes (torchrun (RANK, WORLD_SIZE): process 0 of 2)' child.0 &&
  grep -q 'process 1 of 2' child.1; then
  ok "two torchrun children inside an mpirun task take torchrun's path: $(head -n 1 child.0)"
else
  bad "two torchrun children inside an mpirun task" "mpirun rc $rc (124: hung)" \
    "$(tail -n 3 child.0 child.1 two.out 2>&1)"
fi

# torchrun's one child of one, in an environment faked as an MPI task's
# (process 1 of 2 of Open MPI, PMI and PMIx, no launcher behind it):
# torchrun's path, one process training alone, no MPI_Init (which would
# wait for the fake job's other process or fail).
rc=0
env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 TORCHELASTIC_RUN_ID=test \
  OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 \
  PMI_RANK=1 PMI_SIZE=2 PMIX_RANK=1 \
  timeout 60 "$TRAIN" "${A[@]}" >one.out 2>&1 || rc=$?
if ((rc == 0)) && grep -q '^done after 8 steps' one.out; then
  ok "torchrun's child in a faked MPI task's environment trains alone: $(grep -m1 '^done' one.out)"
else
  bad "torchrun's child in a faked MPI task's environment" "rc $rc (124: hung)" \
    "$(tail -n 5 one.out)"
fi

echo "$passed passed, $failed failed"
((failed == 0))
