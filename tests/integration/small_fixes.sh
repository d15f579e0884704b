#!/usr/bin/env bash
# Tool test: small output and option fixes, as the commands meet them.
#
#   * wds-train --log-rows on a full disk (/dev/full) names the reason
#     ("No space left on device"; it said "cannot write it" without one),
#     stops at the first failed write (no step runs after it; it ran the
#     whole run first), and --json with stdout both on /dev/full name both
#     outputs (only the first was named);
#   * --read-timeout 0x10, -0, 1e3 and inf are refused (decimal seconds,
#     no sign); 1.5 is taken;
#   * --epoch near 2^64 with more --epochs than are left is refused (the
#     number wrapped to epoch 0), naming how many are left; within range it
#     runs, up to the last epoch number and never epoch 0.
#
# Usage: small_fixes.sh WDS_BINARY WDS_TRAIN_BINARY
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup small_fixes "timeout" "$@"
TRAIN=${2:?usage: small_fixes.sh WDS_BINARY WDS_TRAIN_BINARY}
[[ $TRAIN == /* ]] || TRAIN=$OLDPWD/$TRAIN
[[ -x $TRAIN ]] || die "wds-train binary '$TRAIN' not found"

"$PYTHON3" - <<'PY' || die "generating PNG shards (python3 with Pillow)"
import io, random, tarfile
from PIL import Image
rng = random.Random(1)
with tarfile.open("img.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
    for k in range(48):
        im = Image.new("L", (8, 8)); im.putdata([rng.randrange(256) for _ in range(64)])
        b = io.BytesIO(); im.save(b, "PNG")
        for ext, d in (("png", b.getvalue()), ("cls", str(k % 3).encode())):
            ti = tarfile.TarInfo(f"s{k:03d}.{ext}"); ti.size = len(d); ti.mtime = 0
            tf.addfile(ti, io.BytesIO(d))
PY
TRAIN_ARGS=(--train img.tar --device cpu --image-size 8 --channels 1 --hidden 8
  --batch-size 8 --epochs 2 --seed 1 --log-every 1)

# t NAME ARGS...: wds-train ARGS into NAME.out / NAME.err, status in RC.
t() {
  local out=$1
  shift
  RC=0
  timeout 120 "$TRAIN" "$@" >"$out.out" 2>"$out.err" || RC=$?
}

# ---- --log-rows / --json on a full disk ----
t rows "${TRAIN_ARGS[@]}" --log-rows /dev/full
expect_rc "--log-rows /dev/full: exit 1" 1 rows
has "--log-rows /dev/full: the reason named" rows.err \
  "--log-rows /dev/full: cannot write it: No space left on device"
if ! grep -q '^step ' rows.out; then
  ok "--log-rows /dev/full: the run stops at the first failed write"
else
  bad "--log-rows /dev/full: the run stops at the first failed write" \
    "steps ran after it:" "$(grep '^step ' rows.out | tail -2)"
fi
t json "${TRAIN_ARGS[@]}" --json /dev/full
expect_rc "--json /dev/full: exit 1" 1 json
has "--json /dev/full: the reason named" json.err \
  "--json /dev/full: cannot write it: No space left on device"
if [[ $(grep -c '^step ' json.out) == 1 ]]; then
  ok "--json /dev/full: the run stops at the first failed write (one step)"
else
  bad "--json /dev/full: the run stops at the first failed write (one step)" \
    "$(grep -c '^step ' json.out) steps logged"
fi
RC=0
timeout 120 "$TRAIN" "${TRAIN_ARGS[@]}" --json /dev/full >/dev/full 2>both.err || RC=$?
expect_rc "--json and stdout on /dev/full: exit 1" 1 both
has "--json and stdout on /dev/full: --json named" both.err \
  "--json /dev/full: cannot write it: No space left on device"
has "--json and stdout on /dev/full: the output named too" both.err \
  "cannot write the output: No space left on device"

# ---- --read-timeout: decimal seconds, no sign ----
for v in 0x10 -0 1e3 inf; do
  w rt batches --decode cls --read-timeout "$v" img.tar
  expect_rc "--read-timeout $v: usage error (exit 2)" 2 rt
  has "--read-timeout $v: named" rt.err "--read-timeout needs seconds"
done
w rt batches --decode cls --read-timeout 1.5 --batch-size 8 img.tar
expect_rc "--read-timeout 1.5: taken" 0 rt

# ---- --epoch + --epochs past 2^64 - 1 ----
w ep batches --decode cls --epoch 18446744073709551615 --epochs 2 --batch-size 8 img.tar
expect_rc "--epoch 2^64-1 --epochs 2: usage error (exit 2)" 2 ep
has "--epoch 2^64-1 --epochs 2: says why" ep.err \
  "--epoch 18446744073709551615 with --epochs 2 runs past the last epoch number"
w ep batches --decode cls --epoch 18446744073709551614 --epochs 3 --batch-size 8 img.tar
expect_rc "--epoch 2^64-2 --epochs 3: usage error" 2 ep
has "--epoch 2^64-2 --epochs 3: at most 2 from there" ep.err "at most 2 epochs"
w ep batches --decode cls --epoch 18446744073709551614 --epochs 2 --batch-size 8 img.tar
expect_rc "--epoch 2^64-2 --epochs 2: runs" 0 ep
has "--epoch 2^64-2 --epochs 2: the last epoch number delivered" ep.out \
  "18446744073709551615 0"
if ! grep -q '^0 ' ep.out; then
  ok "--epoch 2^64-2 --epochs 2: never epoch 0"
else
  bad "--epoch 2^64-2 --epochs 2: never epoch 0" "$(grep '^0 ' ep.out | head -2)"
fi

echo "$passed passed, $failed failed"
((failed == 0))
