#!/usr/bin/env python3
"""Fixture helpers for the integration tests (Python 3 standard library only).

  fixtures.py tree DIR
      Build DIR/tree (files, directories, links) and write the archive member
      order to DIR/list-full (every entry) and DIR/list-ustar (the entries a
      ustar header can hold), one name per line, relative to DIR/tree.
  fixtures.py payload OUT SIZE SEED [--text]
      Write SIZE deterministic bytes (hex text with --text) to OUT.
  fixtures.py garbage OUT SIZE SEED
      Deterministic bytes that are neither a tar header nor a known
      compression signature.
  fixtures.py offset TAR MEMBER header|data|end
      Byte offset in the plain TAR of MEMBER's header, its data, or the
      512-byte boundary after its data.
  fixtures.py cut IN OUT N             OUT = first N bytes of IN
  fixtures.py flip IN OUT OFFSET       OUT = IN with the byte at OFFSET xor 0x01
  fixtures.py set-size IN OUT HEADER VALUE
      OUT = IN with the 12-byte size field of the header at offset HEADER set
      to VALUE (NUL-padded), and the header checksum recomputed so that only
      the size is wrong.
All generated data is reproducible: no clock, no /dev/urandom.
"""
import hashlib
import os
import sys
import tarfile

MTIME = 1700000000  # every file, directory and link in the tree


def det_bytes(size, seed):
    out = bytearray()
    counter = 0
    while len(out) < size:
        out += hashlib.sha256(f"{seed}:{counter}".encode()).digest()
        counter += 1
    return bytes(out[:size])


def det_text(size, seed):
    out = []
    n = 0
    counter = 0
    while n < size:
        line = hashlib.sha256(f"{seed}:{counter}".encode()).hexdigest() + "\n"
        out.append(line)
        n += len(line)
        counter += 1
    return "".join(out).encode()[:size]


# The fixture tree, in archive order.  (name, kind, arg, ustar_ok)
#   kind "file": arg = size; "dir"; "symlink": arg = target; "hardlink": arg = existing file.
# Comments say what WebDataset 1.0.2 does with each entry.
L1 = "long/" + "d" * 60 + "/" + "e" * 60 + "/sample_long"              # 142 chars: ustar prefix field
L2 = "long/" + "f" * 100 + "/" + "g" * 100 + "/" + "h" * 60            # > 255 chars: gnu/pax only
L3 = "long/" + "x" * 120                                              # last component > 100 chars
U_LONG = "ünïcödé/" + "名" * 40                                        # 45 characters, > 100 bytes
TREE = [
    ("__index__", "file", 17, True),               # metadata (no dot anyway): skipped
    ("__meta.v1__", "file", 5, True),              # "__*__" without "/": skipped
    ("__cache__", "dir", None, True),
    ("__cache__/c0.jpg", "file", 100, True),       # matches __[^/]*__/ : skipped
    ("a.jpg", "file", 1000, True),                 # sample "a": jpg, json, seg.png
    ("a.json", "file", 30, True),
    ("a.seg.png", "file", 2000, True),             # multi-dot extension
    ("b.txt", "file", 10, True),                   # sample "b": txt, cls
    ("README", "file", 50, True),                  # no extension: skipped, does not end "b"
    ("empty.d", "dir", None, True),                # empty directory: skipped
    ("b.cls", "file", 1, True),
    ("link.jpg", "symlink", "a.jpg", True),        # symlink: skipped
    ("c.jpg", "file", 700, True),                  # sample "c"
    ("d.jpg", "file", 701, True),                  # sample "d"
    ("c.txt", "file", 5, True),                    # "c" again, not adjacent: a new sample
    ("hard.jpg", "hardlink", "c.jpg", True),       # hard link to an archived file: skipped
    ("IMG_01.JPG", "file", 3000, True),            # upper-case extensions are lower-cased
    ("IMG_01.Txt", "file", 12, True),
    ("IMG_01.Seg.PNG", "file", 40, True),
    ("with space.jpg", "file", 64, True),
    ("with space.txt", "file", 65, True),
    ("zero.txt", "file", 0, True),                 # zero-byte members
    ("zero.bin", "file", 0, True),
    ("zero.json", "file", 3, True),
    ("big.bin", "file", 1536 * 1024 + 123, True),  # > 1 MiB, not a multiple of 512
    ("big.json", "file", 20, True),
    ("dir.v1", "dir", None, True),
    ("dir.v1/sample.jpg", "file", 511, True),      # dots in the directory name
    ("dir.v1/sample.txt", "file", 513, True),
    ("dir.v1/noext", "file", 7, True),             # no dot in the last component: skipped
    ("dir.v1/.hidden", "file", 8, True),           # the key regex cannot match: skipped
    ("dir.v1/sub.d", "dir", None, True),
    ("dir.v1/sub.d/x.y.z", "file", 9, True),       # key "dir.v1/sub.d/x", extension "y.z"
    (".hidden", "file", 6, True),                  # the key regex cannot match: skipped
    ("hid/.hidden", "file", 4, True),              # key "hid/", extension "hidden"
    ("ünïcödé", "dir", None, True),
    ("ünïcödé/日本語.txt", "file", 21, True),
    ("ünïcödé/日本語.json", "file", 22, True),
    (U_LONG + ".txt", "file", 23, False),
    ("emoji_🙂.png", "file", 24, True),
    ("emoji_🙂.cls", "file", 2, True),
    ("long", "dir", None, True),
    (L1 + ".jpg", "file", 1024, True),
    (L1 + ".txt", "file", 25, True),
    (L2 + ".jpg", "file", 1025, False),
    (L2 + ".txt", "file", 26, False),
    (L2 + ".seg.png", "file", 27, False),
    (L3 + ".jpg", "file", 28, False),
    (L3 + ".cls", "file", 1, False),
    ("long/symlink_long.jpg", "symlink", "../" + "t" * 150 + "/target.jpg", False),
    ("tail.jpg", "file", 29, True),
    ("tail.txt", "file", 30, True),
]


def build_tree(top):
    root = os.path.join(top, "tree")
    os.makedirs(root)
    for name, kind, arg, _ in TREE:
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if kind == "file":
            with open(path, "wb") as f:
                f.write(det_bytes(arg, name))
        elif kind == "dir":
            os.makedirs(path, exist_ok=True)
        elif kind == "symlink":
            os.symlink(arg, path)
        elif kind == "hardlink":
            os.link(os.path.join(root, arg), path)
        else:
            raise ValueError(kind)
    # Fixed times, children before parents (creating a child touches its parent).
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for n in filenames + dirnames:
            os.utime(os.path.join(dirpath, n), (MTIME, MTIME), follow_symlinks=False)
    os.utime(root, (MTIME, MTIME))
    for listname, keep in (("list-full", lambda e: True), ("list-ustar", lambda e: e[3])):
        with open(os.path.join(top, listname), "w", encoding="utf-8") as f:
            for entry in TREE:
                if keep(entry):
                    f.write(entry[0] + "\n")


def member_offset(tar, member, which):
    with tarfile.open(tar, mode="r:", encoding="utf-8") as tf:
        for info in tf:
            if info.name == member:
                if which == "header":
                    return info.offset
                if which == "data":
                    return info.offset_data
                if which == "end":
                    return info.offset_data + (info.size + 511) // 512 * 512
                raise ValueError(which)
    raise SystemExit(f"fixtures.py: {tar}: no member {member!r}")


def set_size(data, header, value):
    field = value.encode()
    if len(field) > 12:
        raise SystemExit("fixtures.py: size value longer than 12 bytes")
    block = bytearray(data[header:header + 512])
    block[124:136] = field + b"\0" * (12 - len(field))
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return data[:header] + bytes(block) + data[header + 512:]


def main(argv):
    if not argv:
        raise SystemExit(__doc__)
    cmd, args = argv[0], argv[1:]
    if cmd == "tree":
        build_tree(args[0])
    elif cmd == "payload":
        size, seed = int(args[1]), args[2]
        data = det_text(size, seed) if "--text" in args[3:] else det_bytes(size, seed)
        with open(args[0], "wb") as f:
            f.write(data)
    elif cmd == "garbage":
        size, seed = int(args[1]), args[2]
        data = det_bytes(size, "garbage:" + seed)
        for magic in (b"\x1f\x8b", b"\x28\xb5\x2f\xfd", b"\xfd7zXZ", b"BZh", b"\0"):
            assert not data.startswith(magic), "garbage starts like a known format; change the seed"
        assert b"ustar" not in data[:512]
        with open(args[0], "wb") as f:
            f.write(data)
    elif cmd == "offset":
        print(member_offset(args[0], args[1], args[2]))
    elif cmd in ("cut", "flip", "set-size"):
        with open(args[0], "rb") as f:
            data = f.read()
        if cmd == "cut":
            n = int(args[2])
            assert 0 < n < len(data), "cut point outside the file"
            data = data[:n]
        elif cmd == "flip":
            off = int(args[2])
            data = data[:off] + bytes([data[off] ^ 0x01]) + data[off + 1:]
        else:
            data = set_size(data, int(args[2]), args[3])
        with open(args[1], "wb") as f:
            f.write(data)
    else:
        raise SystemExit(f"fixtures.py: unknown command {cmd!r}\n{__doc__}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
