"""Test inputs: a directory tree of sample files, a JSON-lines manifest,
shards made by Python WebDataset's ShardWriter and TarWriter, and the
listings they are expected to give. Contents are pseudo-random bytes from a
fixed seed, so every run makes the same data."""

import glob
import json
import os
import random
import re

import numpy as np
import webdataset
from webdataset.tariterators import base_plus_ext

from common import sha256


def blob(rng, lo, hi):
    return rng.randbytes(rng.randint(lo, hi))


def write_file(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def make_tree(root, n=30, seed=1, big=0):
    """Sample files under root: keys s0000.. at the top and sub/t0000.. in a
    subdirectory; extensions jpg, cls, seg.png (multi-dot), json on every
    third sample, an empty .txt on one. big > 0 makes each jpg that many
    bytes. Returns the number of samples."""
    rng = random.Random(seed)
    count = 0
    for i in range(n):
        key = f"s{i:04d}" if i % 5 else f"sub/t{i:04d}"
        base = os.path.join(root, key)
        write_file(base + ".jpg", rng.randbytes(big) if big else blob(rng, 100, 6000))
        write_file(base + ".cls", str(i % 7).encode())
        write_file(base + ".seg.png", blob(rng, 10, 3000))
        if i % 3 == 0:
            write_file(base + ".json", json.dumps({"i": i, "name": key}).encode())
        if i == 4:
            write_file(base + ".txt", b"")
        count += 1
    return count


def tree_listing(root):
    """The samples a directory tree holds by WebDataset's key rules (the
    key is the relative path up to the first dot of the file name), ordered
    by key; URLs are None."""
    samples = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root).replace(os.sep, "/")
            key, ext = base_plus_ext(rel)
            assert key is not None, rel
            with open(path, "rb") as f:
                data = f.read()
            samples.setdefault(key, {})[ext] = (len(data), sha256(data))
    return [(None, k, samples[k]) for k in sorted(samples, key=lambda k: k.encode())]


def make_manifest(root, path, n=12, seed=2):
    """A JSON-lines manifest: jpg and seg.png name files (absolute paths),
    cls is a number. Returns the expected listing (URLs None)."""
    rng = random.Random(seed)
    expected = []
    with open(path, "w") as out:
        for i in range(n):
            key = f"m{i:04d}"
            jpg, seg = blob(rng, 50, 4000), blob(rng, 50, 2000)
            write_file(os.path.join(root, f"img{i}.jpeg"), jpg)
            write_file(os.path.join(root, f"mask{i}.png"), seg)
            cls = str(i % 4).encode()
            out.write(json.dumps({"__key__": key,
                                  "jpg": os.path.join(root, f"img{i}.jpeg"),
                                  "seg.png": os.path.join(root, f"mask{i}.png"),
                                  "cls": i % 4}) + "\n")
            expected.append((None, key, {"jpg": (len(jpg), sha256(jpg)),
                                         "seg.png": (len(seg), sha256(seg)),
                                         "cls": (len(cls), sha256(cls))}))
    return expected


def py_sample(i, rng):
    """A sample as a WebDataset user writes it: encoded by TarWriter's
    default handlers (cls int, json dict, txt str, npy array)."""
    return {"__key__": f"sample{i:05d}",
            "jpg": blob(rng, 100, 5000),
            "cls": i % 10,
            "seg.png": blob(rng, 10, 2000),
            "json": {"i": i, "tags": ["a", "b"]},
            "txt": f"caption {i} ü",
            "npy": np.arange(i % 13, dtype=np.float32)}


def make_shardwriter_shards(pattern, n=40, maxcount=9, seed=3):
    """Shards written by webdataset.ShardWriter; returns their paths."""
    rng = random.Random(seed)
    with webdataset.ShardWriter(pattern, maxcount=maxcount, verbose=0) as sink:
        for i in range(n):
            sink.write(py_sample(i, rng))
    return sorted(glob.glob(re.sub(r"%0?\d*d", "*", pattern)))


def edge_samples(seed=4):
    """Samples with the names that stress the key rules: a directory part,
    dots in a directory name, a long key (PAX header), a non-ASCII key,
    multi-dot and upper-case extensions, an empty field, a .gz field."""
    rng = random.Random(seed)
    return [
        {"__key__": "a/b", "jpg": blob(rng, 10, 900), "cls": 1},
        {"__key__": "a/c", "seg.png": blob(rng, 10, 900), "x.y.z": b"xyz"},
        {"__key__": "dir.with.dots/k", "jpg": blob(rng, 10, 900)},
        {"__key__": "deep/er/still/k0", "txt": "deep"},
        {"__key__": "L" * 180, "jpg": blob(rng, 10, 900), "cls": 2},
        {"__key__": "ünï/cødé", "txt": "unicode ✓", "cls": 3},
        {"__key__": "upper", "JPG": blob(rng, 10, 900), "Seg.PNG": b"seg"},
        {"__key__": "empty", "bin": b"", "cls": 4},
        {"__key__": "gz", "json.gz": {"gz": True}, "txt": "plain"},
        {"__key__": "big", "npy": np.zeros((64, 64), dtype=np.uint8), "cls": 5},
    ]


def make_tarwriter_shard(path, compress=None):
    """One shard written by webdataset.TarWriter (.tar or .tar.gz by name)."""
    with webdataset.TarWriter(path, compress=compress) as sink:
        for s in edge_samples():
            sink.write(s)
    return path
