#!/usr/bin/env bash
# Tool test: stalls and signals, with real processes.
#
#   * SIGINT / SIGTERM to wds ls, batches, index, verify, cat, bench, write
#     and wds-train while a pipe: command stalls: each exits 130 / 143
#     within seconds, says what it finished, leaves no child process (the
#     command) and no temporary file;
#   * SIGKILL: the pipe: command still dies (the warden), also from
#     `wds batches` (worker threads) and `wds-train`, and a `2>&1 | cat`
#     pipeline behind wds ends;
#   * a stalled source with --read-timeout: an error naming the shard and
#     how long it waited, for ls, batches (stop; skip goes on), index and
#     wds-train;
#   * a FIFO with no writer (a shard, an @FILE, wds write's --manifest): the
#     same read timeout, and signals end the wait; wds-train refuses it as
#     --resume.
#
# Every stalled command is `sleep N` with N unique to its check, so a check
# can tell that its own command is gone (pgrep -f).
#
# Usage: faults.sh WDS_BINARY WDS_TRAIN_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup faults "timeout pgrep" "$1"
TRAIN=$2
[[ $TRAIN == /* ]] || TRAIN=$OLDPWD/$TRAIN
[[ -x $TRAIN ]] || die "wds-train binary '$2' not found"

# gone N: no `sleep N` process within 5 s.
gone() {
  local i
  for ((i = 0; i < 50; i++)); do
    pgrep -f "^sleep $1\$" >/dev/null || return 0
    sleep 0.1
  done
  pgrep -af "^sleep $1\$" | sed 's/^/    left running: /'
  return 1
}
# running N: `sleep N` has started (within 5 s).
running() {
  local i
  for ((i = 0; i < 50; i++)); do
    pgrep -f "^sleep $1\$" >/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Shards: 25 samples of 100 bytes; 30 small PNG images with classes.
"$WDS" synth --shards 1 --samples 25 --size 100 'good-%02d.tar' >/dev/null ||
  die "wds synth"
"$PYTHON3" - <<'PY' || die "generating images (python3 with Pillow)"
import io, tarfile
from PIL import Image
with tarfile.open("img.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
    for k in range(30):
        im = Image.new("L", (8, 8), color=k * 8)
        b = io.BytesIO(); im.save(b, "PNG")
        for ext, d in (("png", b.getvalue()), ("cls", str(k % 10).encode())):
            ti = tarfile.TarInfo(f"{k:04d}.{ext}"); ti.size = len(d)
            tf.addfile(ti, io.BytesIO(d))
PY

# interrupt NAME SIGNAL STATUS N CMD...: runs CMD in the background (its
# `sleep N` stalls), sends SIGNAL once the command runs, and checks the exit
# status, the message and that `sleep N` is gone. stdout goes to NAME.out,
# stderr to NAME.err.
interrupt() {
  local name=$1 sig=$2 want=$3 n=$4
  shift 4
  # env --default-signal: a background job of a script starts with SIGINT
  # ignored, and a tool keeps an ignored signal ignored (as nohup wants).
  env --default-signal=INT,TERM timeout -s KILL 30 "$@" >"$name.out" 2>"$name.err" &
  local pid=$!
  if ! running "$n"; then
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    bad "$name" "its pipe: command never started" "$(cat "$name.err")"
    return
  fi
  sleep 0.3
  # timeout runs the tool as its child: signal the tool itself.
  local tool
  tool=$(pgrep -P "$pid" | head -1)
  kill "-$sig" "${tool:-$pid}"
  local rc=0
  wait "$pid" || rc=$?
  local msg
  msg=$(cat "$name.err")
  if [[ $rc != "$want" ]]; then
    bad "$name" "exit status $rc, want $want" "$msg"
  elif [[ $msg != *"interrupted by SIG$sig"* ]]; then
    bad "$name" "no 'interrupted by SIG$sig' message" "$msg"
  elif ! gone "$n"; then
    bad "$name" "the pipe: command outlived it"
  else
    ok "$name"
  fi
}

interrupt ls_sigint INT 130 7101 "$WDS" ls 'good-00.tar::pipe:sleep 7101'
grep -q 'interrupted by SIGINT; 25 samples listed' ls_sigint.err &&
  ok ls_says_what_was_listed || bad ls_says_what_was_listed "$(cat ls_sigint.err)"
interrupt ls_sigterm TERM 143 7102 "$WDS" ls 'pipe:sleep 7102'
interrupt batches_sigint INT 130 7103 "$WDS" batches 'pipe:sleep 7103' \
  'good-00.tar' --decode bin --workers 2
interrupt bench_sigint INT 130 7104 "$WDS" bench 'pipe:sleep 7104'
interrupt bench_loader_sigterm TERM 143 7105 "$WDS" bench 'pipe:sleep 7105' \
  --decode bin
interrupt verify_sigint INT 130 7106 "$WDS" verify 'good-00.tar::pipe:sleep 7106'
grep -q '1 of 2 shards verified' verify_sigint.err &&
  ok verify_says_what_was_verified || bad verify_says_what_was_verified "$(cat verify_sigint.err)"

mkdir ix
interrupt index_sigint INT 130 7107 "$WDS" index 'good-00.tar::pipe:sleep 7107' \
  -o ix/set.json
if [[ -z $(ls -A ix) ]]; then ok index_leaves_no_file; else
  bad index_leaves_no_file "$(ls -A ix)"; fi
interrupt cat_sigterm TERM 143 7108 "$WDS" cat 'good-00.tar::pipe:sleep 7108'

mkdir out
interrupt write_sigint INT 130 7109 "$WDS" write -o 'out/s-%02d.tar' --maxcount 10 \
  'good-00.tar::pipe:sleep 7109'
if [[ $(ls out) == $'s-00.tar\ns-01.tar' ]] &&
  grep -q '2 shards completed, the unfinished one removed' write_sigint.err &&
  "$WDS" ls out/s-01.tar | wc -l | grep -qx 10; then
  ok write_keeps_complete_shards_only
else
  bad write_keeps_complete_shards_only "$(ls -A out)" "$(cat write_sigint.err)"
fi

# wds-train: interrupted mid-epoch while a shard stalls (resampled mode
# draws it), and while training (a checkpoint is named).
interrupt train_sigint INT 130 7110 "$TRAIN" --device cpu --image-size 8 \
  --channels 1 --hidden 8 --batch-size 4 --mode resampled \
  --samples-per-epoch 1000 --epochs 1000 --train 'img.tar::pipe:sleep 7110'
grep -q 'steps done' train_sigint.err && ok train_says_how_far ||
  bad train_says_how_far "$(cat train_sigint.err)"
env --default-signal=INT timeout -s KILL 60 "$TRAIN" --device cpu \
  --image-size 8 --channels 1 --hidden 8 --batch-size 2 --epochs 100000 \
  --checkpoint-every 5 --checkpoint ck.bin --train img.tar \
  >train2.out 2>train2.err &
pid=$!
for ((i = 0; i < 100; i++)); do [[ -e ck.bin ]] && break; sleep 0.1; done
kill -INT "$(pgrep -P "$pid" | head -1)"
rc=0
wait "$pid" || rc=$?
if [[ $rc == 130 ]] && grep -q 'checkpoint ck.bin is at step' train2.err &&
  [[ -z $(ls -A | grep 'ck.bin.tmp') ]]; then
  ok train_sigint_names_the_checkpoint
else
  bad train_sigint_names_the_checkpoint "exit $rc" "$(cat train2.err)" "$(ls -A)"
fi

# SIGKILL: nothing runs the tool's clean-up; the warden stops the command.
killed() {
  local name=$1 n=$2
  shift 2
  "$@" >/dev/null 2>&1 &
  local pid=$!
  if ! running "$n"; then
    kill -KILL "$pid"
    bad "$name" "its pipe: command never started"
    return
  fi
  kill -KILL "$pid"
  wait "$pid" 2>/dev/null || true
  if gone "$n"; then ok "$name"; else bad "$name" "the pipe: command outlived it"; fi
}
killed ls_sigkill 7201 "$WDS" ls 'pipe:sleep 7201'
killed batches_sigkill 7202 "$WDS" batches 'pipe:sleep 7202' 'pipe:sleep 7202' \
  --decode bin --workers 2
killed train_sigkill 7203 "$TRAIN" --device cpu --image-size 8 --channels 1 \
  --mode resampled --samples-per-epoch 100 --train 'pipe:sleep 7203'
killed index_sigkill 7204 "$WDS" index 'pipe:sleep 7204' -o ix/k.json

# `wds ... 2>&1 | cat`: once wds is killed nobody holds the pipe, so the
# pipeline ends (a surviving command kept wds's stderr open).
("$WDS" ls 'pipe:sleep 7205' 2>&1 | cat >/dev/null) &
sub=$!
if running 7205; then
  pkill -KILL -f "wds ls pipe:sleep 7205"
  for ((i = 0; i < 50; i++)); do kill -0 "$sub" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$sub" 2>/dev/null; then
    bad pipeline_ends_after_sigkill "still running after 5 s"
    kill -KILL "$sub"
  else
    ok pipeline_ends_after_sigkill
  fi
else
  bad pipeline_ends_after_sigkill "its pipe: command never started"
fi
wait 2>/dev/null || true

# Read timeouts: a bounded wait and an error naming the shard.
timed() {
  local name=$1 want=$2
  shift 2
  local t0=$SECONDS rc=0
  timeout -s KILL 30 "$@" >"$name.out" 2>"$name.err" || rc=$?
  local msg
  msg=$(cat "$name.err")
  if [[ $rc != 1 ]]; then
    bad "$name" "exit status $rc, want 1" "$msg"
  elif [[ $msg != *"$want"* ]]; then
    bad "$name" "the message lacks '$want'" "$msg"
  elif ((SECONDS - t0 > 15)); then
    bad "$name" "took $((SECONDS - t0)) s"
  else
    ok "$name"
  fi
}
timed ls_read_timeout 'pipe:sleep 7301: no data for 1.0 s' \
  "$WDS" ls --read-timeout 1 'pipe:sleep 7301'
timed batches_read_timeout 'pipe:sleep 7302: no data for 0.5 s' \
  "$WDS" batches 'pipe:sleep 7302' --decode bin --read-timeout 0.5
timed index_read_timeout 'pipe:sleep 7303: no data for 0.5 s' \
  "$WDS" index --read-timeout 0.5 'pipe:sleep 7303'
timed train_read_timeout 'pipe:sleep 7304: no data for 1.0 s' \
  "$TRAIN" --device cpu --image-size 8 --channels 1 --read-timeout 1 \
  --train 'img.tar::pipe:sleep 7304'
# Skipped under --on-error skip: the good shard's 25 samples still come.
rc=0
timeout -s KILL 30 "$WDS" batches 'good-00.tar::pipe:sleep 7305' --decode bin \
  --read-timeout 0.5 --on-error skip --batch-size 25 >skip.out 2>skip.err || rc=$?
if [[ $rc == 0 ]] && [[ $(wc -l <skip.out) == 1 ]]; then ok batches_skip_stalled_shard
else bad batches_skip_stalled_shard "exit $rc" "$(cat skip.out skip.err)"; fi
for n in 7301 7302 7303 7304 7305; do
  gone "$n" || bad "timeout_$n" "sleep $n left running"
done

# A FIFO with no writer: open(2) used to block for good
# (restarted after a signal), past --read-timeout and the first SIGINT. Now
# the shard times out like a stalled pipe, a signal ends the wait, an @FILE
# FIFO times out too, and wds-train refuses a FIFO as --resume at once.
mkfifo nowriter.tar
timed fifo_ls_read_timeout 'nowriter.tar: no data for 2.0 s' \
  "$WDS" ls --read-timeout 2 nowriter.tar
timed fifo_batches_read_timeout 'nowriter.tar: no data for 1.0 s' \
  "$WDS" batches nowriter.tar --decode bin --read-timeout 1
timed fifo_plain_batches_read_timeout 'nowriter.tar: no data for 1.0 s' \
  "$WDS" batches nowriter.tar --mode plain --decode bin --read-timeout 1
# verify reports a shard's problem on stdout, and exits 1
t0=$SECONDS rc=0
timeout -s KILL 30 "$WDS" verify --read-timeout 1 nowriter.tar >vf.out 2>vf.err || rc=$?
if [[ $rc == 1 ]] && grep -q 'nowriter.tar: .*no data for 1.0 s' vf.out &&
  ((SECONDS - t0 <= 15)); then
  ok fifo_verify_read_timeout
else
  bad fifo_verify_read_timeout "exit $rc after $((SECONDS - t0)) s" "$(cat vf.out vf.err)"
fi
timed fifo_bench_read_timeout 'nowriter.tar: no data for 1.0 s' \
  "$WDS" bench --read-timeout 1 nowriter.tar
timed fifo_spec_file_read_timeout 'cannot open @FILE "nowriter.tar": no data for 1.0 s' \
  "$WDS" ls --read-timeout 1 @nowriter.tar
timed fifo_train_resume_refused 'checkpoint nowriter.tar: not a regular file (a FIFO)' \
  "$TRAIN" --device cpu --image-size 8 --channels 1 --train img.tar \
  --resume nowriter.tar
timed fifo_write_manifest_read_timeout 'manifest nowriter.tar: no data for 1.0 s' \
  "$WDS" write -o 'wm-%02d.tar' --read-timeout 1 --manifest nowriter.tar
# fifo_signal NAME SIGNAL STATUS CMD...: CMD waits on the FIFO (no read
# timeout); SIGNAL ends it within 5 s with STATUS and its message.
fifo_signal() {
  local name=$1 sig=$2 want=$3
  shift 3
  env --default-signal=INT,TERM timeout -s KILL 30 "$@" >"$name.out" 2>"$name.err" &
  local pid=$! tool="" i
  for ((i = 0; i < 50; i++)); do
    sleep 0.1
    tool=$(pgrep -P "$pid" | head -1)
    [[ -z $tool ]] || break
  done
  sleep 0.5 # in its wait on the FIFO
  local t0=$SECONDS rc=0
  kill "-$sig" "${tool:-$pid}"
  wait "$pid" || rc=$?
  if [[ $rc != "$want" ]]; then
    bad "$name" "exit status $rc, want $want" "$(cat "$name.err")"
  elif ((SECONDS - t0 > 5)); then
    bad "$name" "took $((SECONDS - t0)) s after SIG$sig"
  elif ! grep -q "interrupted by SIG$sig" "$name.err"; then
    bad "$name" "no 'interrupted by SIG$sig' message" "$(cat "$name.err")"
  else
    ok "$name"
  fi
}
fifo_signal fifo_ls_sigint INT 130 "$WDS" ls --read-timeout 0 nowriter.tar
fifo_signal fifo_batches_sigint INT 130 "$WDS" batches nowriter.tar --decode bin \
  --read-timeout 0
fifo_signal fifo_verify_sigterm TERM 143 "$WDS" verify nowriter.tar
fifo_signal fifo_write_manifest_sigint INT 130 "$WDS" write -o 'wm-%02d.tar' \
  --manifest nowriter.tar
# With a writer the FIFO is read as before.
(sleep 0.5 && cat good-00.tar >nowriter.tar) &
if [[ $(timeout -s KILL 30 "$WDS" ls nowriter.tar | wc -l) == 25 ]]; then
  ok fifo_with_a_writer_is_read
else
  bad fifo_with_a_writer_is_read
fi
wait

echo "$passed passed, $failed failed"
((failed == 0))
