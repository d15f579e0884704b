#!/usr/bin/env bash
# Tool test: the per-image memory budget in every front
# end that decodes: `wds batches`, `wds bench` and `wds verify --decode`
# (--image-memory-limit), and `wds-train` (the same flag). A 2048x2048 gray
# PNG of one colour (12 MiB decoded as RGB, 4 MiB as gray) is refused under
# a 2M budget with the named error (shard, sample, field, its size, the
# limit; `wds batches --on-error skip` goes on past it), and decodes under
# the default (256M); a malformed size is a usage error (exit 2).
#
# Usage: image_budget.sh WDS_BINARY WDS_TRAIN_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup image_budget "timeout" "$1"
TRAIN=$2
[[ $TRAIN == /* ]] || TRAIN=$OLDPWD/$TRAIN
[[ -x $TRAIN ]] || die "wds-train binary '$TRAIN' not found"

"$PYTHON3" - <<'PY' || die "generating the shard"
import io, struct, tarfile, zlib
def chunk(kind, data):
    c = struct.pack(">I", len(data)) + kind + data
    return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
w = h = 2048
z = zlib.compressobj(1)
idat = b"".join(z.compress(b"\0" * (w + 1)) for _ in range(h)) + z.flush()
png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0))
       + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
with tarfile.open("big-000.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
    for i in range(4):
        for ext, d in (("png", png), ("cls", b"1")):
            ti = tarfile.TarInfo(f"s{i}.{ext}"); ti.size = len(d); ti.mtime = 0
            tf.addfile(ti, io.BytesIO(d))
PY

named() { # NAME FILE: the budget error, named
  local f=$2
  if grep -qF 'big-000.tar' "$f" && grep -qF 'sample "s' "$f" &&
    grep -qF "field 'png'" "$f" && grep -qF 2048x2048 "$f" &&
    grep -qF 'image_memory_limit' "$f"; then
    ok "$1"
  else
    bad "$1" "$(head -c 600 "$f")"
  fi
}

w b1 batches big-000.tar --decode png:rgb:8,cls --batch-size 2 --image-memory-limit 2M
expect_rc "batches: over the budget: exit 1" 1 b1
named "batches: the error names shard, sample, field, size, limit" b1.err
w b2 batches big-000.tar --decode png:rgb:8,cls --batch-size 2
expect_rc "batches: the default budget decodes it" 0 b2
w b3 batches big-000.tar --decode png:rgb:8,cls --batch-size 2 --image-memory-limit 2M --on-error skip
expect_rc "batches: --on-error skip goes on" 0 b3
w b4 batches big-000.tar --decode png:rgb:8,cls --image-memory-limit lots
expect_rc "batches: a malformed size is a usage error" 2 b4
has "batches: the usage error names the flag" b4.err "--image-memory-limit needs a size"

w n1 bench big-000.tar --decode png:rgb:8,cls --batch-size 2 --image-memory-limit 2M
expect_rc "bench: over the budget: exit 1" 1 n1
named "bench: the error named" n1.err
w n2 bench big-000.tar --decode png:rgb:8,cls --batch-size 2
expect_rc "bench: the default budget decodes it" 0 n2

w v1 verify --decode --image-memory-limit 2M big-000.tar
expect_rc "verify --decode: over the budget is a problem (exit 1)" 1 v1
if grep -qF 2048x2048 v1.out v1.err && grep -qF image_memory_limit v1.out v1.err; then
  ok "verify --decode: the problem names the size and the limit"
else
  bad "verify --decode: the problem names the size and the limit" "$(head -c 600 v1.out)"
fi
w v2 verify --decode big-000.tar
expect_rc "verify --decode: the default budget decodes it" 0 v2

RC=0
timeout 120 "$TRAIN" --device cpu --train big-000.tar --image-size 8 --channels 1 \
  --batch-size 2 --epochs 1 --image-memory-limit 2M >t1.out 2>t1.err || RC=$?
expect_rc "wds-train: over the budget: exit 1" 1 t1
named "wds-train: the error named" t1.err
RC=0
timeout 120 "$TRAIN" --device cpu --train big-000.tar --image-size 8 --channels 1 \
  --batch-size 2 --epochs 1 >t2.out 2>t2.err || RC=$?
expect_rc "wds-train: the default budget decodes it" 0 t2

echo "$passed passed, $failed failed"
((failed == 0))
