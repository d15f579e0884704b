#!/usr/bin/env bash
# Tool test: the shard writer's pattern lock cannot be skipped. `wds write -o DIR/shard-%06d.tar` takes an flock on
# DIR/.shard-%d.tar.lock; a lock file that cannot be opened or used is an
# error naming it and the reason (it was skipped: two writers both exited
# 0 and left one mixed shard set):
#
#   * a directory, or a FIFO, at the lock's path: exit 1 naming the lock
#     file ("Is a directory", "not a regular file"), no shard written, and
#     no hang on the FIFO;
#   * as a user (nobody, through setpriv; skipped with a line saying so
#     where it cannot switch), in a shared directory (1777): root's 0644
#     lock held by a running writer (flock(1)) makes the second writer
#     exit 1 "another writer" (it had exit 0); root's 0600 lock that nobody
#     can open exits 1 naming the file and "Permission denied"; root's
#     0644 lock left unheld is taken (read-only: flock needs no write
#     access) and the run succeeds.
#
# Usage: write_lock.sh WDS_BINARY
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup write_lock "timeout flock mkfifo" "$@"
chmod 755 "$TMP"
mkdir tree
for k in a b c; do printf '%s' "$k" >"tree/$k.txt"; done

# ---- a directory at the lock's path ----
mkdir -p d1/.shard-%d.tar.lock
w dir write -o 'd1/shard-%06d.tar' tree
expect_rc "directory at the lock path: exit 1" 1 dir
has "directory at the lock path: names the lock file and the reason" dir.err \
  "cannot open the pattern's lock file d1/.shard-%d.tar.lock: Is a directory"
check "directory at the lock path: no shard written" test ! -e d1/shard-000000.tar

# ---- a FIFO at the lock's path ----
mkdir d2
mkfifo d2/.shard-%d.tar.lock
W_TIMEOUT=20 w fifo write -o 'd2/shard-%06d.tar' tree
expect_rc "FIFO at the lock path: exit 1, no hang" 1 fifo
has "FIFO at the lock path: names it" fifo.err \
  "cannot use the pattern's lock file d2/.shard-%d.tar.lock: it is not a regular file"
check "FIFO at the lock path: no shard written" test ! -e d2/shard-000000.tar

# ---- another user's lock in a shared directory ----
if setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
  as_nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
  mkdir -m 1777 shared
  lock=shared/.shard-%d.tar.lock
  # root's writer holds the lock (0644, as the writer creates it)
  (umask 022 && : >"$lock")
  # one process holding it (killing it frees the lock: no child keeps it)
  (exec 8<"$lock" && flock 8 && exec sleep 60) &
  holder=$!
  for _ in $(seq 50); do # until flock(1) holds it
    flock -n "$lock" true 2>/dev/null || break
    sleep 0.1
  done
  rc=0
  as_nobody timeout 60 "$WDS" write -o 'shared/shard-%06d.tar' tree \
    >held.out 2>held.err || rc=$?
  RC=$rc
  expect_rc "user, root's 0644 lock held: exit 1" 1 held
  has "user, root's 0644 lock held: another writer" held.err \
    "another writer is writing this pattern"
  check "user, root's 0644 lock held: no shard written" \
    test ! -e shared/shard-000000.tar
  kill "$holder" 2>/dev/null || true
  wait "$holder" 2>/dev/null || true

  # root's 0600 lock: nobody can open it at all
  chmod 600 "$lock"
  rc=0
  as_nobody timeout 60 "$WDS" write -o 'shared/shard-%06d.tar' tree \
    >perm.out 2>perm.err || rc=$?
  RC=$rc
  expect_rc "user, root's 0600 lock: exit 1" 1 perm
  has "user, root's 0600 lock: names the lock file and the reason" perm.err \
    "cannot open the pattern's lock file shared/.shard-%d.tar.lock: Permission denied"
  check "user, root's 0600 lock: no shard written" \
    test ! -e shared/shard-000000.tar

  # root's 0644 lock left unheld: taken read-only, the run succeeds
  chmod 644 "$lock"
  rc=0
  as_nobody timeout 60 "$WDS" write -o 'shared/shard-%06d.tar' tree \
    >free.out 2>free.err || rc=$?
  RC=$rc
  expect_rc "user, root's 0644 lock unheld: taken, exit 0" 0 free
  check "user, root's 0644 lock unheld: the shard written" \
    test -s shared/shard-000000.tar
else
  echo "SKIP: the other-user cases (setpriv cannot switch to nobody here)"
fi

echo "$passed passed, $failed failed"
((failed == 0))
