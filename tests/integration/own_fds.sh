#!/usr/bin/env bash
# Tool test: outputs that are not streamed, named by the process's own
# descriptors: `wds index -o`, `wds write -o` and
# `wds-train --checkpoint` given /dev/stdout, /dev/stderr, /dev/fd/N or
# /proc/self/fd/N that resolve to a regular file write through the
# descriptor, in place: the file gets the bytes the same command writes to
# a named file (after what it held, under >>), nothing is created beside
# /dev/stdout (as a user, no "Permission denied" on /dev/stdout.tmp-PID-N;
# /dev/fd/5 with 5>file, no "No such file or directory"), and as root
# /dev/stdout stays the link it was (it was replaced by a regular file
# holding the index). A descriptor open for reading only, or not open, is
# an error naming it; --checkpoint-every with --checkpoint /dev/fd/N is a
# usage error, nothing written (each checkpoint was appended to the last).
#
#   * as a user: setpriv to nobody (the tests run as root); skipped, with a
#     line saying so, when setpriv cannot switch users;
#   * as root: in a private mount namespace (unshare -m) whose /dev is a
#     tmpfs copy (null, zero, full, urandom and the fd links), so the
#     machine's own /dev/stdout is never at risk; skipped, saying so, when
#     unshare is not permitted (a container without CAP_SYS_ADMIN).
# Both skipped: exit 77.
#
# Usage: own_fds.sh WDS_BINARY WDS_TRAIN_BINARY
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup own_fds "timeout cmp" "$@"
TRAIN=${2:?usage: own_fds.sh WDS_BINARY WDS_TRAIN_BINARY}
[[ $TRAIN == /* ]] || TRAIN=$OLDPWD/$TRAIN
[[ -x $TRAIN ]] || die "wds-train binary '$TRAIN' not found"
skipped=0

# ---- fixtures (readable by nobody) ----
chmod 755 "$TMP"
"$WDS" synth --shards 1 --samples 20 --size 64 small.tar >/dev/null
mkdir tree
printf 'hello' >tree/a.txt
printf 'world' >tree/b.txt
"$PYTHON3" - <<'PY' || die "generating PNG shards (python3 with Pillow)"
import io, random, tarfile
from PIL import Image
rng = random.Random(1)
with tarfile.open("img.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
    for k in range(16):
        im = Image.new("L", (8, 8)); im.putdata([rng.randrange(256) for _ in range(64)])
        b = io.BytesIO(); im.save(b, "PNG")
        for ext, d in (("png", b.getvalue()), ("cls", str(k % 3).encode())):
            ti = tarfile.TarInfo(f"s{k:03d}.{ext}"); ti.size = len(d); ti.mtime = 0
            tf.addfile(ti, io.BytesIO(d))
PY
TRAIN_ARGS=(--train img.tar --device cpu --image-size 8 --channels 1 --hidden 8
  --batch-size 8 --epochs 1 --seed 1)
# The references: the same commands writing named files.
# (An index to stdout names its shards as given, as with -o -.)
"$WDS" index -o - "$TMP/small.tar" >ref.idx || die "wds index"
"$WDS" write -o ref.tar "$TMP/tree" >/dev/null || die "wds write"
"$TRAIN" --train "$TMP/img.tar" "${TRAIN_ARGS[@]:2}" --checkpoint ref.ck \
  >/dev/null || die "wds-train"
chmod 644 ref.idx ref.tar ref.ck small.tar img.tar

# --checkpoint-every through a descriptor: each checkpoint was appended
# after the previous one and --resume refused the file. A usage error now,
# naming the path, before anything is written.
RC=0
"$TRAIN" --train "$TMP/img.tar" "${TRAIN_ARGS[@]:2}" --checkpoint /dev/fd/5 \
  --checkpoint-every 1 5>every_fd5.got >every_fd5.out 2>every_fd5.err || RC=$?
expect_rc "--checkpoint /dev/fd/5 --checkpoint-every 1: usage error" 2 every_fd5
has "--checkpoint /dev/fd/5 --checkpoint-every 1: named" every_fd5.err \
  "--checkpoint-every: --checkpoint /dev/fd/5 is one of the process's own descriptors"
check "--checkpoint /dev/fd/5 --checkpoint-every 1: nothing written" \
  test ! -s every_fd5.got

# The cases, run by one shell as the user under test in directory D (its
# own, writable by that user): each leaves its output in D/NAME.got, its
# status in D/NAME.rc and its stderr in D/NAME.err.
cat >cases.sh <<'EOF'
set -u
WDS=$1 TRAIN=$2 FIX=$3 D=$4
shift 4
cd "$D" || exit 1
run() { # NAME CMD...: runs CMD, its status into NAME.rc
  local name=$1 rc=0
  shift
  timeout 60 "$@" || rc=$?
  echo "$rc" >"$name.rc"
}
run index_stdout "$WDS" index -o /dev/stdout "$FIX/small.tar" >index_stdout.got 2>index_stdout.err
run index_stderr "$WDS" index -o /dev/stderr "$FIX/small.tar" 2>index_stderr.got >index_stderr.err
run index_fd5 "$WDS" index -o /dev/fd/5 "$FIX/small.tar" 5>index_fd5.got >index_fd5.err 2>&1
run index_proc "$WDS" index -o /proc/self/fd/6 "$FIX/small.tar" 6>index_proc.got >index_proc.err 2>&1
run write_stdout "$WDS" write -o /dev/stdout "$FIX/tree" >write_stdout.got 2>write_stdout.err
run write_fd5 "$WDS" write -o /dev/fd/5 "$FIX/tree" 5>write_fd5.got >write_fd5.err 2>&1
run train_fd5 "$TRAIN" --train "$FIX/img.tar" "$@" --checkpoint /dev/fd/5 5>train_fd5.got >train_fd5.err 2>&1
# Appended after what is there, as a shell redirection would (>>).
printf 'HEAD' >index_append.got
run index_append "$WDS" index -o /dev/stdout "$FIX/small.tar" >>index_append.got 2>index_append.err
# A descriptor open for reading only, and one not open: errors naming it.
run index_ro "$WDS" index -o /dev/fd/7 "$FIX/small.tar" 7<"$FIX/small.tar" >index_ro.got 2>index_ro.err
run index_closed "$WDS" index -o /dev/fd/9 "$FIX/small.tar" >index_closed.got 2>index_closed.err
ls -la /dev/stdout /dev/ >dev.after 2>&1
EOF
TRAIN_REST=("${TRAIN_ARGS[@]:2}")

# check_cases WHO D: the results of cases.sh in D.
check_cases() {
  local who=$1 d=$2 n
  for n in index_stdout:ref.idx index_stderr:ref.idx index_fd5:ref.idx \
    index_proc:ref.idx write_stdout:ref.tar write_fd5:ref.tar \
    train_fd5:ref.ck; do
    local name=${n%%:*} ref=${n#*:}
    if [[ $(cat "$d/$name.rc") == 0 ]] && cmp -s "$d/$name.got" "$ref"; then
      ok "$who: $name: written in place through the descriptor"
    else
      bad "$who: $name: written in place through the descriptor" \
        "exit $(cat "$d/$name.rc"), $(wc -c <"$d/$name.got") bytes (want $(wc -c <"$ref"))" \
        "$(head -c 400 "$d/$name.err")"
    fi
  done
  if [[ $(cat "$d/index_append.rc") == 0 ]] &&
    cmp -s "$d/index_append.got" <(printf 'HEAD'; cat ref.idx); then
    ok "$who: >> keeps what was there (no truncation, no rename)"
  else
    bad "$who: >> keeps what was there (no truncation, no rename)" \
      "$(head -c 300 "$d/index_append.err")"
  fi
  if [[ $(cat "$d/index_ro.rc") == 1 ]] &&
    grep -q '/dev/fd/7: descriptor 7 is open for reading only' "$d/index_ro.err"; then
    ok "$who: a read-only descriptor is an error naming it"
  else
    bad "$who: a read-only descriptor is an error naming it" \
      "exit $(cat "$d/index_ro.rc")" "$(head -c 300 "$d/index_ro.err")"
  fi
  if [[ $(cat "$d/index_closed.rc") == 1 ]] &&
    grep -q '/dev/fd/9: descriptor 9: Bad file descriptor' "$d/index_closed.err"; then
    ok "$who: a descriptor not open is an error naming it"
  else
    bad "$who: a descriptor not open is an error naming it" \
      "exit $(cat "$d/index_closed.rc")" "$(head -c 300 "$d/index_closed.err")"
  fi
  has "$who: write -o /dev/stdout: the summary on stderr, as with -o -" \
    "$d/write_stdout.err" 'wrote 1 shard, 2 samples'
  if ! grep -q 'tmp-' "$d/dev.after"; then
    ok "$who: no temporary beside /dev/stdout"
  else
    bad "$who: no temporary beside /dev/stdout" "$(grep tmp- "$d/dev.after")"
  fi
}

# ---- as a user ----
mkdir -m 777 user
if setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
  setpriv --reuid=nobody --regid=nogroup --clear-groups \
    bash cases.sh "$WDS" "$TRAIN" "$TMP" "$TMP/user" "${TRAIN_REST[@]}"
  check_cases "user" user
else
  echo "SKIP: the user case (setpriv cannot switch to nobody here)"
  skipped=1
fi

# ---- as root, in a private mount namespace with a copy of /dev ----
mkdir root devcopy
cat >ns.sh <<'EOF'
set -eu
T=$1
shift
mount --make-rprivate /
mount -t tmpfs -o mode=755 wds-test-dev "$T/devcopy"
for n in null zero full urandom random; do cp -a "/dev/$n" "$T/devcopy/"; done
ln -s /proc/self/fd "$T/devcopy/fd"
ln -s /proc/self/fd/0 "$T/devcopy/stdin"
ln -s /proc/self/fd/1 "$T/devcopy/stdout"
ln -s /proc/self/fd/2 "$T/devcopy/stderr"
mount --bind "$T/devcopy" /dev
set +e
bash "$T/cases.sh" "$@"
# What /dev/stdout is after the runs (a link: untouched).
if [ -L /dev/stdout ]; then echo link; else ls -la /dev/stdout; fi >"$T/root/stdout.kind"
EOF
if unshare -m true 2>/dev/null; then
  unshare -m bash ns.sh "$TMP" "$WDS" "$TRAIN" "$TMP" "$TMP/root" "${TRAIN_REST[@]}"
  check_cases "root" root
  if [[ $(cat root/stdout.kind 2>/dev/null) == link ]]; then
    ok "root: /dev/stdout is still a link"
  else
    bad "root: /dev/stdout is still a link" "$(cat root/stdout.kind 2>&1)"
  fi
else
  echo "SKIP: the root case (unshare -m is not permitted here)"
  skipped=1
fi

echo "$passed passed, $failed failed"
((failed == 0)) || exit 1
((passed > 0)) || exit 77
