#!/usr/bin/env python3
"""Compute the sample listing Python WebDataset 1.0.2 gives for a plain tar file.

Independent of wds: members are read in archive order with Python's tarfile
module, then the rules of webdataset/tariterators.py (1.0.2) are applied:
  * only regular members count (directories, symlinks, hard links are skipped);
  * metadata is skipped: a name without "/" that starts and ends with "__", or
    one matching r"__[^/]*__($|/)" (e.g. "__index__", "__cache__/x.jpg");
  * key and extension come from r"^((?:.*/|)[^.]+)[.]([^/]*)$": the key is the
    path up to the first dot of the last component, the extension the rest,
    lower-cased; a name that does not match is skipped;
  * consecutive members with equal keys form one sample; skipped members do not
    end a sample; a repeated extension in one sample is an error.
Each field is reported as its size and sha256.

Usage: expect_from_tree.py PLAIN.tar [--url URL] [--limit N]
Prints JSON lines {"__key__": K, ["__url__": U,] "fields": {EXT: {"size", "sha256"}}}.
Exit 0; 3 on a duplicate extension (samples before it are printed); 1 on other errors.
Python 3 standard library only.
"""
import argparse
import hashlib
import json
import re
import sys
import tarfile

KEY_RE = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
META_RE = re.compile(r"__[^/]*__($|/)")


class DuplicateError(Exception):
    pass


def is_meta(name):
    return ("/" not in name and name.startswith("__") and name.endswith("__")) or \
        META_RE.match(name) is not None


def split_key(name):
    """(key, lower-cased extension), or None when the name has no extension."""
    m = KEY_RE.match(name)
    if not m:
        return None
    return m.group(1), m.group(2).lower()


def samples(path, emit):
    """Call emit(sample) for each sample of the plain tar at path, in order."""
    current = None
    # "r:" accepts only an uncompressed tar: the expectation is computed from
    # the plain variant, never through a decompressor.
    with tarfile.open(path, mode="r:", encoding="utf-8", errors="surrogateescape") as tf:
        for info in tf:
            if not info.isreg():
                continue
            name = info.name
            if is_meta(name):
                continue
            parts = split_key(name)
            if parts is None:
                continue
            key, ext = parts
            h = hashlib.sha256()
            size = 0
            f = tf.extractfile(info)
            while True:
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                h.update(chunk)
                size += len(chunk)
            if current is None or current["__key__"] != key:
                if current is not None:
                    emit(current)
                current = {"__key__": key, "fields": {}}
            if ext in current["fields"]:
                raise DuplicateError(f"{name}: duplicate extension {ext!r} in sample {key!r}")
            current["fields"][ext] = {"size": size, "sha256": h.hexdigest()}
    if current is not None:
        emit(current)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tar", help="an uncompressed tar file")
    ap.add_argument("--url", help="add this __url__ to every sample")
    ap.add_argument("--limit", type=int, help="print at most this many samples")
    args = ap.parse_args(argv)
    out = []

    def emit(sample):
        if args.url is not None:
            sample = {"__key__": sample["__key__"], "__url__": args.url, "fields": sample["fields"]}
        out.append(sample)

    status = 0
    try:
        samples(args.tar, emit)
    except DuplicateError as exn:
        print(f"expect_from_tree: {exn}", file=sys.stderr)
        status = 3
    except (OSError, tarfile.TarError) as exn:
        print(f"expect_from_tree: {args.tar}: {exn}", file=sys.stderr)
        return 1
    if args.limit is not None:
        out = out[:args.limit]
    for sample in out:
        print(json.dumps(sample, sort_keys=True, ensure_ascii=True))
    return status


if __name__ == "__main__":
    sys.exit(main())
