"""d. A `wds write` killed with SIGKILL mid-run leaves no truncated shard
under a final name: every file the output pattern names reads to the end
with Python's tarfile and with `wds ls`, and holds --maxcount samples.

The input is a tar stream on stdin from a slow producer (one sample every
10 ms), so the kill lands while shards are being written, not after."""

import os
import signal
import subprocess
import sys
import tarfile
import time
import zlib

from common import ASSUMED, Failure, require_command, tarfile_members, wds_listing
from check_write import final_shards

MAXCOUNT = 5

PRODUCER = r"""
import io, os, sys, tarfile, time
out = os.fdopen(1, "wb", buffering=0)
with tarfile.open(fileobj=out, mode="w|") as tf:
    for i in range(3000):
        for ext, data in (("jpg", bytes([i % 256]) * 20000), ("cls", str(i % 10).encode())):
            ti = tarfile.TarInfo(f"k{i:06d}.{ext}")
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        time.sleep(0.01)
"""


def kill_midway(ctx, outdir, pattern, min_shards, extra_delay_s):
    """Starts producer | wds write, waits until min_shards final shards
    exist (and extra_delay_s more), SIGKILLs wds. Returns the final shards."""
    os.makedirs(outdir, exist_ok=True)
    # The producer dies of EPIPE after the kill: its stderr is noise.
    producer = subprocess.Popen([sys.executable, "-c", PRODUCER], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
    writer = subprocess.Popen([ctx.wds, "write", "-o", os.path.join(outdir, pattern),
                               "--maxcount", str(MAXCOUNT), "-"],
                              stdin=producer.stdout, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    producer.stdout.close()
    try:
        deadline = time.monotonic() + 30
        while len(final_shards(outdir, pattern)) < min_shards:
            if writer.poll() is not None:
                raise Failure(f"wds write exited ({writer.returncode}) before it was killed:",
                              writer.stderr.read().decode(errors="replace")[-1000:])
            if time.monotonic() > deadline:
                raise Failure(f"no {min_shards} shards after 30 s in {outdir}: {os.listdir(outdir)}")
            time.sleep(0.002)
        time.sleep(extra_delay_s)
        if writer.poll() is not None:
            raise Failure(f"wds write exited ({writer.returncode}) before it was killed")
        writer.send_signal(signal.SIGKILL)
        writer.wait(timeout=30)
    finally:
        for p in (writer, producer):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
        writer.stderr.close()
    return final_shards(outdir, pattern)


def check_kill(ctx, outdir, pattern, extra_delay_s):
    require_command(ctx, "write", ASSUMED["write"])
    finals = kill_midway(ctx, outdir, pattern, 3, extra_delay_s)
    for name in finals:
        path = os.path.join(outdir, name)
        try:
            members = tarfile_members(path)
        except (OSError, EOFError, tarfile.TarError, zlib.error) as e:
            raise Failure(f"{name} (a final name) does not read with tarfile: {type(e).__name__}: {e}",
                          f"all files: {sorted(os.listdir(outdir))}")
        if len(members) != 2 * MAXCOUNT:
            raise Failure(f"{name}: {len(members)} members, expected {2 * MAXCOUNT}")
        samples = wds_listing(ctx, [path])
        if len(samples) != MAXCOUNT:
            raise Failure(f"{name}: wds ls lists {len(samples)} samples, expected {MAXCOUNT}")
    others = sorted(set(os.listdir(outdir)) - set(finals))
    print(f"# killed after {len(finals)} shards; other files left: {others or 'none'}")


def run(ctx):
    base = ctx.dir("kill")
    for i, (pattern, delay) in enumerate((("k-%04d.tar", 0.0), ("k-%04d.tar", 0.025),
                                          ("g-%04d.tar.gz", 0.025))):
        ctx.check(f"kill: SIGKILL wds write - -o {pattern} (+{delay * 1000:.0f} ms) leaves only "
                  "complete final shards", check_kill, ctx, os.path.join(base, f"run{i}"),
                  pattern, delay)
