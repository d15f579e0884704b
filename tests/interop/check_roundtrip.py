"""c. write -> index -> verify -> ls -> loader round trips on four layouts:
many small shards (--maxcount), shards split by --maxsize, and .tar.zst with
one frame and with several (zstd frames of about 1 MiB of tar each, which
zstd -dc, tar and WebDataset read as one stream)."""

import json
import math
import os
import shutil

from common import (ASSUMED, Failure, compare_listings, in_dir, python_listing,
                    require_command, run_wds, strip_urls, wds_listing)
import fixtures
from check_write import final_shards

LAYOUTS = [
    # name, samples, jpg bytes (0: small random), pattern, write options
    ("small", 45, 0, "rt-%04d.tar", ["--maxcount", "4"]),
    ("maxsize", 24, 30000, "big-%04d.tar", ["--maxsize", "200000"]),
    ("zstd", 45, 0, "z-%04d.tar.zst", ["--maxcount", "16"]),
    ("zstd-frames", 24, 300000, "zf-%04d.tar.zst", ["--maxcount", "12"]),
]
MAXSIZE = 200000


class Layout:
    def __init__(self, root, name, n, big, pattern, opts):
        self.dir = os.path.join(root, name)
        self.tree = os.path.join(root, name + "-tree")
        self.name, self.n, self.big, self.pattern, self.opts = name, n, big, pattern, opts
        self.shards = []  # names, relative to self.dir
        self.spec = None  # a brace spec of them

    def urls(self):
        return list(self.shards)

    @classmethod
    def existing(cls, ctx, directory, shards, spec):
        """A layout of shards made elsewhere (by Python), listed by Python."""
        lay = cls(directory, "", 0, 0, "", [])
        lay.dir, lay.shards, lay.spec = directory, [os.path.basename(s) for s in shards], spec
        with in_dir(directory):
            lay.listing = python_listing(lay.shards)
        return lay


def write(ctx, lay):
    require_command(ctx, "write", ASSUMED["write"])
    fixtures.make_tree(lay.tree, n=lay.n, seed=7, big=lay.big)
    os.makedirs(lay.dir, exist_ok=True)
    run_wds(ctx, ["write", "-o", lay.pattern] + lay.opts + [lay.tree], cwd=lay.dir)
    lay.shards = final_shards(lay.dir, lay.pattern)
    if len(lay.shards) < 2:
        raise Failure(f"{len(lay.shards)} shard(s) from {lay.n} samples with {' '.join(lay.opts)}")
    width = lay.pattern.split("%")[1].split("d")[0]  # "04"
    lay.spec = lay.pattern.replace(f"%{width}d", "{%s..%s}" % (
        format(0, width + "d"), format(len(lay.shards) - 1, width + "d")))
    # The listing, as wds reads it (zstd is beyond Python's tarfile), and
    # for plain tar the same as Python's.
    lay.listing = wds_listing(ctx, [lay.spec], cwd=lay.dir)
    compare_listings("input files", fixtures.tree_listing(lay.tree),
                     "wds ls --json", strip_urls(lay.listing))
    with in_dir(lay.dir):
        if lay.pattern.endswith(".tar"):
            compare_listings("Python WebDataset", python_listing(lay.urls()),
                             "wds ls --json", lay.listing)
        else:  # .tar.zst, read as WebDataset users do, through a pipe
            py = python_listing([f"pipe:zstd -dcq {s}" for s in lay.shards])
            compare_listings("Python WebDataset (pipe:zstd -dcq)", strip_urls(py),
                             "wds ls --json", strip_urls(lay.listing))
            if lay.name == "zstd-frames":
                check_frames(lay)
    return True


def zstd_frames(path):
    """(frames, checksummed frames) of a zstd file, walked by its headers."""
    data = open(path, "rb").read()
    at = frames = checked = 0
    while at < len(data):
        magic = int.from_bytes(data[at:at + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame
            at += 8 + int.from_bytes(data[at + 4:at + 8], "little")
            continue
        if magic != 0xFD2FB528:
            raise Failure(f"{path}: no zstd frame at byte {at}")
        fhd = data[at + 4]
        did = (0, 1, 2, 4)[fhd & 3]
        single = (fhd >> 5) & 1
        fcs = (1, 2, 4, 8)[fhd >> 6] if (fhd >> 6) or single else 0
        pos = at + 5 + (0 if single else 1) + did + fcs
        while True:  # blocks: 3-byte headers
            bh = int.from_bytes(data[pos:pos + 3], "little")
            last, btype, bsize = bh & 1, (bh >> 1) & 3, bh >> 3
            pos += 3 + (1 if btype == 1 else bsize)
            if last:
                break
        if (fhd >> 2) & 1:
            pos += 4
            checked += 1
        frames += 1
        at = pos
    return frames, checked


def check_frames(lay):
    """Shards of several MiB are several frames, each with a checksum, and
    zstd, tar and Python's tarfile (through zstd -dc) read each whole."""
    import subprocess
    import tarfile
    for s in lay.shards:
        path = os.path.join(lay.dir, s)
        frames, checked = zstd_frames(path)
        if frames < 2 or checked != frames:
            raise Failure(f"{s}: {frames} zstd frame(s), {checked} with a checksum")
        tar = subprocess.run(["zstd", "-dcq", path], check=True, capture_output=True).stdout
        names = subprocess.run(["tar", "-tf", "-"], input=tar, check=True,
                               capture_output=True).stdout.decode().split()
        with tarfile.open(fileobj=__import__("io").BytesIO(tar), mode="r|") as t:
            py_names = [m.name for m in t]
        want = sum(1 for u, _, _ in lay.listing if os.path.basename(u) == s)
        if names != py_names or len(names) < want:
            raise Failure(f"{s}: tar lists {len(names)} members, tarfile {len(py_names)}")


def check_maxsize(lay):
    for s in lay.shards:
        size = os.path.getsize(os.path.join(lay.dir, s))
        nsamples = sum(1 for u, _, _ in lay.listing if u == s)
        if size > MAXSIZE and nsamples > 1:
            raise Failure(f"{s}: {size} bytes with {nsamples} samples, over --maxsize {MAXSIZE}")


def counts_by_url(lay):
    counts = {s: 0 for s in lay.shards}
    for url, _, _ in lay.listing:
        counts[url] += 1
    return counts


def check_index(ctx, lay):
    require_command(ctx, "index", ASSUMED["index"])
    run_wds(ctx, ["index", lay.spec, "-o", "index.json"], cwd=lay.dir)
    with open(os.path.join(lay.dir, "index.json")) as f:
        ix = json.load(f)
    got = [(e.get("url"), e.get("nsamples"), e.get("filesize")) for e in ix.get("shardlist", [])]
    counts = counts_by_url(lay)
    want = [(s, counts[s], os.path.getsize(os.path.join(lay.dir, s))) for s in lay.shards]
    if got != want:
        raise Failure("index.json shardlist (url, nsamples, filesize) differs:",
                      f"  index: {got[:4]}{' ...' if len(got) > 4 else ''}",
                      f"  files: {want[:4]}{' ...' if len(want) > 4 else ''}")


def check_verify(ctx, lay):
    require_command(ctx, "verify", ASSUMED["verify"])
    run_wds(ctx, ["verify", lay.spec], cwd=lay.dir)
    run_wds(ctx, ["verify", "--require", "jpg,cls", lay.spec], cwd=lay.dir)


def check_ls_index(ctx, lay):
    require_command(ctx, "index", ASSUMED["index"])
    for extra in ([], ["--json"]):
        scan = run_wds(ctx, ["ls", "--summary"] + extra + [lay.spec], cwd=lay.dir).stdout
        fast = run_wds(ctx, ["ls", "--summary", "--index", "index.json"] + extra + [lay.spec],
                       cwd=lay.dir).stdout
        if scan != fast:
            raise Failure(f"wds ls --summary {' '.join(extra)} differs with --index:",
                          "scan:  " + scan.decode(errors="replace"),
                          "index: " + fast.decode(errors="replace"))


def batches_keys(ctx, lay, rank, index):
    args = ["batches", lay.spec, "--mode", "exact", "--decode", "cls", "--world", "2",
            "--rank", str(rank), "--batch-size", "3", "--workers", "2", "--json"]
    if index:
        args += ["--index", "index.json"]
    out = run_wds(ctx, args, cwd=lay.dir).stdout.decode()
    return out, [k for line in out.splitlines() for k in json.loads(line)["keys"]]


def check_loader(ctx, lay):
    require_command(ctx, "index", ASSUMED["index"])
    keys = [k for _, k, _ in lay.listing]
    per_rank = math.ceil(len(keys) / 2)
    union = []
    for rank in (0, 1):
        out, got = batches_keys(ctx, lay, rank, index=True)
        if len(got) != per_rank:
            raise Failure(f"rank {rank}: {len(got)} rows, expected ceil({len(keys)}/2) = {per_rank}")
        counted, _ = batches_keys(ctx, lay, rank, index=False)
        if counted != out:
            raise Failure(f"rank {rank}: batches with --index differ from the counting pass")
        union += got
    if set(union) != set(keys):
        missing = sorted(set(keys) - set(union))[:5]
        unknown = sorted(set(union) - set(keys))[:5]
        raise Failure(f"keys of both ranks are not the samples: missing {missing}, unknown {unknown}")
    repeats = len(union) - len(set(union))
    if repeats != 2 * per_rank - len(keys):
        raise Failure(f"{repeats} repeated keys, expected {2 * per_rank - len(keys)} (padding)")


def check_stale(ctx, lay):
    """A shard whose size changed after indexing is reported as stale."""
    require_command(ctx, "index", ASSUMED["index"])
    stale = lay.dir + "-stale"
    shutil.copytree(lay.dir, stale)
    with open(os.path.join(stale, lay.shards[-1]), "ab") as f:
        f.write(b"\0" * 1024)
    for args in (["batches", lay.spec, "--mode", "exact", "--index", "index.json", "--decode",
                  "cls"], ["ls", "--summary", "--index", "index.json", lay.spec]):
        p = run_wds(ctx, args, cwd=stale, ok_codes=(1,))
        err = p.stderr.decode(errors="replace")
        if "stale" not in err or lay.shards[-1] not in err:
            raise Failure(f"wds {args[0]}: the message does not say stale and name {lay.shards[-1]}:",
                          err)


def run(ctx):
    root = ctx.dir("roundtrip")
    for spec in LAYOUTS:
        lay = Layout(root, *spec)
        what = f"roundtrip {lay.name} ({lay.n} samples, {lay.pattern} {' '.join(lay.opts)})"
        if not ctx.check(f"{what}: write, read back = input", write, ctx, lay):
            continue
        if lay.name == "maxsize":
            ctx.check(f"{what}: no shard over --maxsize", check_maxsize, lay)
        ctx.check(f"{what}: index matches the shards", check_index, ctx, lay)
        ctx.check(f"{what}: verify exits 0", check_verify, ctx, lay)
        ctx.check(f"{what}: ls --summary --index = scanning", check_ls_index, ctx, lay)
        ctx.check(f"{what}: exact loader, 2 ranks, --index", check_loader, ctx, lay)
        if lay.name == "small":
            ctx.check(f"{what}: stale index reported", check_stale, ctx, lay)
