"""b. Shards written by Python WebDataset (ShardWriter, TarWriter; .tar and
.tar.gz) are read by wds as Python reads them: `wds ls --json`, a brace
spec, `wds cat` (read back by Python through pipe:) and re-sharding with
`wds write`."""

import os
import shlex
import tarfile

from common import (ASSUMED, Failure, compare_listings, python_listing, require_command,
                    run_wds, strip_urls, wds_listing)
import check_roundtrip
import fixtures
from check_write import final_shards


def check_ls(ctx, shards):
    py = python_listing(shards)
    if not py:
        raise Failure(f"Python WebDataset read no sample from {shards}")
    compare_listings("Python WebDataset", py, "wds ls --json", wds_listing(ctx, shards))
    return py


def check_brace_spec(ctx, spec):
    """Both expand the same brace spec to the same URLs and samples."""
    compare_listings("Python WebDataset", python_listing(spec),
                     "wds ls --json", wds_listing(ctx, [spec]))


def check_cat(ctx, shards, py):
    require_command(ctx, "cat", ASSUMED["cat"])
    cmd = "pipe:" + " ".join(shlex.quote(a) for a in [ctx.wds, "cat"] + shards)
    compare_listings("Python WebDataset (shards)", strip_urls(py),
                     "Python WebDataset (wds cat)", strip_urls(python_listing(cmd)))


def check_reshard(ctx, shards, py, outdir):
    require_command(ctx, "write", ASSUMED["write"])
    os.makedirs(outdir, exist_ok=True)
    pattern = "re-%04d.tar"
    run_wds(ctx, ["write", "-o", os.path.join(outdir, pattern), "--maxcount", "7"] + shards)
    out = [os.path.join(outdir, f) for f in final_shards(outdir, pattern)]
    compare_listings("Python WebDataset (original)", strip_urls(py),
                     "Python WebDataset (resharded by wds write)", strip_urls(python_listing(out)))


def check_cut_at_boundary(ctx, shard, base):
    """A known, deliberate difference: Python's tarfile takes a tar cut at a
    member boundary (no end-of-archive marker) for a complete one, so
    WebDataset silently reads a prefix of the samples; wds reports it."""
    with open(shard, "rb") as f:
        data = f.read()
    with tarfile.open(shard) as tf:
        cut = tf.getmembers()[4].offset  # the header of the 5th member
    path = os.path.join(base, "cut.tar")
    with open(path, "wb") as f:
        f.write(data[:cut])
    py = python_listing([path])
    print(f"# note: Python WebDataset reads {len(py)} samples from {os.path.basename(path)} "
          "without an error; wds ls reports it truncated")
    p = run_wds(ctx, ["ls", path], ok_codes=(1,))
    err = p.stderr.decode(errors="replace")
    if "truncated" not in err or path not in err:
        raise Failure("wds ls: the message does not say truncated and name the shard:", err)


def check_verify(ctx, shards):
    require_command(ctx, "verify", ASSUMED["verify"])
    run_wds(ctx, ["verify"] + shards)


def check_index_loader(ctx, base, shards, spec):
    """wds index counts what Python reads; the exact-mode loader over 2
    ranks gives every key Python reads."""
    lay = check_roundtrip.Layout.existing(ctx, base, shards, spec)
    check_roundtrip.check_index(ctx, lay)
    check_roundtrip.check_loader(ctx, lay)


def run(ctx):
    base = ctx.dir("pywriters")
    sets = []
    for ext in (".tar", ".tar.gz"):
        pattern = os.path.join(base, "sw-%04d" + ext)
        shards = ctx.check(f"pywriters: ShardWriter {ext} (maxcount 9) written",
                           fixtures.make_shardwriter_shards, pattern)
        if shards is not None:
            sets.append((f"ShardWriter {ext}", shards))
            spec = "sw-{0000..%04d}%s" % (len(shards) - 1, ext)
            ctx.check(f"pywriters: ShardWriter {ext} brace spec: same URLs and samples",
                      check_brace_spec, ctx, os.path.join(base, spec))
            ctx.check(f"pywriters: ShardWriter {ext}: wds index counts, exact loader keys as Python",
                      check_index_loader, ctx, base, shards, spec)
        path = os.path.join(base, "tw" + ext)
        shard = ctx.check(f"pywriters: TarWriter {ext} (edge-case names) written",
                          fixtures.make_tarwriter_shard, path)
        if shard is not None:
            sets.append((f"TarWriter {ext}", [shard]))
            if ext == ".tar":
                ctx.check("pywriters: TarWriter shard cut at a member boundary: wds ls says truncated",
                          check_cut_at_boundary, ctx, shard, base)

    for i, (name, shards) in enumerate(sets):
        py = ctx.check(f"pywriters: {name} read by wds ls --json as by Python", check_ls, ctx, shards)
        if py is None:
            continue
        ctx.check(f"pywriters: {name}: wds verify exits 0", check_verify, ctx, shards)
        ctx.check(f"pywriters: {name} through wds cat, read by Python", check_cat, ctx, shards, py)
        ctx.check(f"pywriters: {name} resharded by wds write, read by Python", check_reshard,
                  ctx, shards, py, os.path.join(base, f"reshard{i}"))
