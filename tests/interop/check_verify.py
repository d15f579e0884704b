"""e. `wds verify` catches each planted defect: exit status 1 and a report
naming the shard (and the sample, where there is one). Shards are made
with Python's tarfile, two per set; the defect is always in the second, so
verify must read past a clean shard."""

import io
import json
import os
import tarfile

from common import ASSUMED, Failure, require_command, run_wds

SPEC = "v-{000..001}.tar"
BAD = "v-001.tar"


def members(first, count, skip_cls=()):
    out = []
    for i in range(first, first + count):
        out.append((f"s{i:03d}.jpg", bytes([i]) * (700 + 37 * i)))
        if i not in skip_cls:
            out.append((f"s{i:03d}.cls", str(i % 10).encode()))
    return out


def tar_bytes(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in entries:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def header_offset(data, index):
    """Byte offset of the index-th member's header."""
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        return tf.getmembers()[index].offset


def truncated():
    data = tar_bytes(members(10, 10))
    return data[: len(data) * 6 // 10 + 100], None


def bad_checksum():
    data = bytearray(tar_bytes(members(10, 10)))
    off = header_offset(bytes(data), 6)  # s013.jpg
    data[off + 136] ^= 0x01  # a digit of mtime; chksum left as it was
    return bytes(data), None


def duplicate_ext():
    m = members(10, 10)
    i = m.index(("s015.cls", b"5"))
    m.insert(i + 1, ("s015.jpg", b"again"))
    return tar_bytes(m), "s015"


def key_reappears():
    m = members(10, 10)
    i = m.index(("s013.cls", b"3"))
    m.insert(i + 1, ("s012.txt", b"late"))
    return tar_bytes(m), "s012"


def missing_required():
    return tar_bytes(members(10, 10, skip_cls=(17,))), "s017"


DEFECTS = [
    # name, maker, extra verify args
    ("truncated shard", truncated, []),
    ("header checksum error", bad_checksum, []),
    ("repeated extension in a sample", duplicate_ext, []),
    ("key reappears non-adjacently", key_reappears, []),
    ("missing --require field", missing_required, ["--require", "jpg,cls"]),
]


def make_set(root, name, second):
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "v-000.tar"), "wb") as f:
        f.write(tar_bytes(members(0, 10)))
    with open(os.path.join(d, BAD), "wb") as f:
        f.write(second)
    return d


def check_clean(ctx, root):
    require_command(ctx, "verify", ASSUMED["verify"])
    d = make_set(root, "clean", tar_bytes(members(10, 10)))
    run_wds(ctx, ["verify", SPEC], cwd=d)
    run_wds(ctx, ["verify", "--require", "jpg,cls", SPEC], cwd=d)
    # A sample without cls is no problem unless cls is required.
    d = make_set(root, "unrequired", missing_required()[0])
    run_wds(ctx, ["verify", SPEC], cwd=d)


def check_defect(ctx, root, name, maker, extra):
    require_command(ctx, "verify", ASSUMED["verify"])
    second, key = maker()
    d = make_set(root, name.replace(" ", "-"), second)
    p = run_wds(ctx, ["verify"] + extra + [SPEC], cwd=d, ok_codes=(1,))
    report = (p.stdout + p.stderr).decode(errors="replace")
    for want in [BAD] + ([key] if key else []):
        if want not in report:
            raise Failure(f"the report does not name {want}:", report[-1500:])


def check_json(ctx, root):
    """--json: a JSON document (or JSON lines) naming shard and sample."""
    require_command(ctx, "verify", ASSUMED["verify"])
    second, key = duplicate_ext()
    d = make_set(root, "json", second)
    p = run_wds(ctx, ["verify", "--json", SPEC], cwd=d, ok_codes=(1,))
    text = p.stdout.decode(errors="replace")
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        try:
            docs = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise Failure(f"--json output is neither JSON nor JSON lines ({e}):", text[-1500:])
    dumped = json.dumps(docs, ensure_ascii=False)
    for want in (BAD, key):
        if want not in dumped:
            raise Failure(f"--json output does not name {want}:", text[-1500:])


def run(ctx):
    root = ctx.dir("verify")
    ctx.check("verify: clean shards exit 0 (with and without --require)", check_clean, ctx, root)
    for name, maker, extra in DEFECTS:
        ctx.check(f"verify: {name} -> exit 1, the report names it", check_defect,
                  ctx, root, name, maker, extra)
    ctx.check("verify: --json report is JSON naming shard and sample", check_json, ctx, root)
