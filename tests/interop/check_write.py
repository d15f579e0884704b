"""a. Shards written by `wds write` are read by Python WebDataset with the
input's samples, and `wds ls --json` reports the same."""

import filecmp
import math
import os
import re

from common import (ASSUMED, Failure, compare_listings, python_listing, require_command,
                    run_wds, strip_urls, wds_listing)
import fixtures


def final_shards(outdir, pattern):
    """Files in outdir whose names the printf pattern can produce."""
    rx = re.compile(re.sub(r"%0?(\d*)d", lambda m: r"\d{%s,}" % (m.group(1) or 1),
                           re.escape(pattern).replace(r"\%", "%")) + "$")
    return sorted(f for f in os.listdir(outdir) if rx.match(f))


def write_tree(ctx, tree, outdir, pattern, maxcount):
    require_command(ctx, "write", ASSUMED["write"])
    os.makedirs(outdir, exist_ok=True)
    run_wds(ctx, ["write", "-o", os.path.join(outdir, pattern), "--maxcount", str(maxcount), tree])
    return [os.path.join(outdir, f) for f in final_shards(outdir, pattern)]


def check_layout(outdir, pattern, shards, nsamples, maxcount):
    """Shard names are the pattern's numbers from 0, ceil(n/maxcount) of
    them, and nothing else (no temporary file) is left in outdir."""
    want = math.ceil(nsamples / maxcount)
    names = [os.path.basename(s) for s in shards]
    expect = [pattern % i for i in range(want)]
    if names != expect:
        raise Failure(f"shards {names}, expected {expect} ({nsamples} samples, --maxcount {maxcount})")
    extra = sorted(set(os.listdir(outdir)) - set(names))
    if extra:
        raise Failure(f"files left beside the shards in {outdir}: {extra}")


def check_three_way(ctx, shards, expected):
    """Python WebDataset reads the input's samples; wds ls agrees with it,
    URLs included."""
    py = python_listing(shards)
    compare_listings("input files", expected, "Python WebDataset", strip_urls(py))
    compare_listings("Python WebDataset", py, "wds ls --json", wds_listing(ctx, shards))


def check_deterministic(ctx, tree, outdir, pattern, maxcount, shards):
    again = write_tree(ctx, tree, outdir + "-again", pattern, maxcount)
    for a, b in zip(shards, again):
        if not filecmp.cmp(a, b, shallow=False):
            raise Failure(f"{a} and {b}: the same input gave different bytes")
    if len(again) != len(shards):
        raise Failure(f"{len(shards)} shards, then {len(again)}")


def write_manifest(ctx, manifest, outdir, pattern):
    require_command(ctx, "write", ASSUMED["write"])
    os.makedirs(outdir, exist_ok=True)
    run_wds(ctx, ["write", "-o", os.path.join(outdir, pattern), "--maxcount", "5",
                  "--manifest", manifest])
    return [os.path.join(outdir, f) for f in final_shards(outdir, pattern)]


def run(ctx):
    base = ctx.dir("write")
    tree = os.path.join(base, "tree")
    n = fixtures.make_tree(tree, n=30)
    expected = fixtures.tree_listing(tree)
    assert len(expected) == n

    for ext, maxcount in ((".tar", 7), (".tar.gz", 10)):
        pattern = "w-%06d" + ext
        outdir = os.path.join(base, "out" + ext)
        shards = ctx.check(f"write: wds write a directory tree to {pattern} --maxcount {maxcount}",
                           write_tree, ctx, tree, outdir, pattern, maxcount)
        if shards is None:
            continue
        ctx.check(f"write: {ext} shard names and no leftovers", check_layout,
                  outdir, pattern, shards, n, maxcount)
        ctx.check(f"write: {ext} read by Python WebDataset = input files = wds ls",
                  check_three_way, ctx, shards, expected)
        ctx.check(f"write: {ext} the same input gives byte-identical shards",
                  check_deterministic, ctx, tree, outdir, pattern, maxcount, shards)

    mdir = os.path.join(base, "manifest")
    mfile = os.path.join(mdir, "samples.jsonl")
    os.makedirs(mdir, exist_ok=True)
    mexpected = fixtures.make_manifest(mdir, mfile)
    for ext in (".tar", ".tar.gz"):
        pattern = "m-%04d" + ext
        shards = ctx.check(f"write: wds write --manifest (JSON lines) to {pattern}",
                           write_manifest, ctx, mfile, os.path.join(mdir, "out" + ext), pattern)
        if shards is not None:
            ctx.check(f"write: manifest {ext} read by Python WebDataset = manifest = wds ls",
                      check_three_way, ctx, shards, mexpected)
