"""Shared helpers of the interoperability test: running wds, listing samples
as wds and as Python WebDataset see them, comparing listings, reporting.

A listing is a list of samples in stream order, each a tuple
(url, key, fields) with fields a dict {ext: (size, sha256 hex)}. Python
WebDataset's own metadata (__key__, __url__, __local_path__) is not a field.
"""

import contextlib
import gzip
import hashlib
import json
import os
import subprocess
import tarfile

import webdataset

TIMEOUT_S = 180


class Failure(Exception):
    """A failed assertion; args are the lines of the explanation."""


class Context:
    """What every check group gets: the wds binary, its own temp dir, and
    the pass/fail tally."""

    def __init__(self, wds, tmp):
        self.wds = wds
        self.tmp = tmp
        self.passed = 0
        self.failed = 0

    def dir(self, name):
        path = os.path.join(self.tmp, name)
        os.makedirs(path, exist_ok=True)
        return path

    def check(self, name, fn, *args):
        """Runs fn(*args); prints `ok NAME` or `FAIL NAME` and the reasons.
        Returns fn's result, or None when it failed."""
        try:
            result = fn(*args)
        except Failure as f:
            self._fail(name, [str(a) for a in f.args])
            return None
        except AssertionError as f:
            self._fail(name, [str(f) or "assertion failed"])
            return None
        except Exception as f:  # a bug in the check or an unexpected tool error
            self._fail(name, [f"{type(f).__name__}: {f}"])
            return None
        print(f"ok {name}", flush=True)
        self.passed += 1
        return result

    def _fail(self, name, lines):
        print(f"FAIL {name}", flush=True)
        for block in lines:
            for line in block.splitlines():
                print(f"    {line}", flush=True)
        self.failed += 1


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------ wds


def run_wds(ctx, args, cwd=None, stdin=None, ok_codes=(0,), timeout=TIMEOUT_S):
    """Runs `wds ARGS`; a status outside ok_codes is a Failure naming the
    command and its stderr. Returns the CompletedProcess (bytes output)."""
    try:
        p = subprocess.run([ctx.wds] + list(args), cwd=cwd, stdin=stdin,
                           capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failure(f"wds {' '.join(args)}: no exit after {timeout} s")
    if p.returncode not in ok_codes:
        raise Failure(f"wds {' '.join(args)} (in {cwd or os.getcwd()}): exit status {p.returncode}"
                      f" (expected {' or '.join(map(str, ok_codes))})",
                      "stderr: " + p.stderr.decode(errors="replace")[-1500:],
                      "stdout: " + p.stdout.decode(errors="replace")[-800:])
    return p


_missing_cache = {}


def require_command(ctx, name, assumed):
    """Fails when `wds NAME` does not exist yet, naming the flags the check
    assumes."""
    if name not in _missing_cache:
        p = subprocess.run([ctx.wds, name, "--help"], capture_output=True, timeout=60)
        text = (p.stdout + p.stderr).decode(errors="replace")
        _missing_cache[name] = "unknown command" in text
    if _missing_cache[name]:
        raise Failure(f"`wds {name}` does not exist in this build (wds: unknown command '{name}')",
                      f"this check assumes: {assumed}")


ASSUMED = {
    "write": "wds write -o PATTERN [--maxcount N] [--maxsize BYTES] [--manifest FILE] [INPUT]"
             " (INPUT: a directory, a shard spec, or - for a tar stream on stdin)",
    "index": "wds index SPEC... -o FILE (JSON: shardlist[] with url, nsamples, filesize)",
    "verify": "wds verify SPEC... [--require EXT,EXT] [--json]; exit 0 clean, 1 on a problem",
    "cat": "wds cat SPEC... (one tar stream on stdout)",
    "ls-index": "wds ls --summary --index FILE SPEC...",
}


def wds_listing(ctx, specs, cwd=None):
    """The samples `wds ls --json SPEC...` reports."""
    p = run_wds(ctx, ["ls", "--json"] + list(specs), cwd=cwd)
    out = []
    for line in p.stdout.decode("utf-8", errors="surrogateescape").splitlines():
        obj = json.loads(line)
        fields = {ext: (f["size"], f["sha256"]) for ext, f in obj["fields"].items()}
        out.append((obj["__url__"], obj["__key__"], fields))
    return out


# ------------------------------------------------------------ Python side


def sample_fields(sample):
    return {k: (len(v), sha256(v)) for k, v in sample.items() if not k.startswith("__")}


@contextlib.contextmanager
def in_dir(path):
    """Runs the body with path as the working directory (for relative URLs)."""
    here = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(here)


def python_listing(urls):
    """The samples Python WebDataset reads from urls (a list, or a single
    URL such as "pipe:CMD"), in order, with no decoding."""
    ds = webdataset.WebDataset(urls, shardshuffle=False)
    return [(s["__url__"], s["__key__"], sample_fields(s)) for s in ds]


def tarfile_members(path):
    """Reads every member of a tar (plain or gzip) to the end; returns
    [(name, size)]. A truncated or corrupt file raises: Python's tarfile
    takes a tar cut at a header boundary for a complete one, so the
    (decompressed) stream must also end with the two zero blocks of the
    end-of-archive marker, and a gzip stream must be complete."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith((".gz", ".tgz")):
        data = gzip.decompress(data)  # EOFError when cut short
    if len(data) % 512 or len(data) < 1024 or data[-1024:].count(0) != 1024:
        raise Failure(f"{path}: {len(data)} tar bytes, not ending with an end-of-archive marker")
    members = []
    with tarfile.open(path, "r:*") as tf:
        for ti in tf:
            if ti.isreg():
                data = tf.extractfile(ti).read()
                if len(data) != ti.size:
                    raise Failure(f"{path}: member {ti.name} has {len(data)} of {ti.size} bytes")
                members.append((ti.name, ti.size))
    return members


# -------------------------------------------------------------- comparing


def describe(sample):
    url, key, fields = sample
    parts = ", ".join(f"{e}:{s}:{h[:10]}" for e, (s, h) in sorted(fields.items()))
    return f"{key!r} in {url}: {parts}"


def compare_listings(name_a, a, name_b, b, urls=True):
    """Raises a Failure describing the first difference between two
    listings (sample order, keys, extensions, sizes and sha256; URLs too
    unless urls is False)."""
    def norm(listing):
        return [(u if urls else None, k, f) for u, k, f in listing]

    na, nb = norm(a), norm(b)
    if na == nb:
        return
    lines = [f"{name_a}: {len(a)} samples, {name_b}: {len(b)} samples"]
    for i, (x, y) in enumerate(zip(na, nb)):
        if x != y:
            lines.append(f"first difference at sample {i}:")
            lines.append(f"  {name_a}: {describe(x)}")
            lines.append(f"  {name_b}: {describe(y)}")
            if x[1] == y[1] and x[2].keys() == y[2].keys():
                for ext in x[2]:
                    if x[2][ext] != y[2][ext]:
                        lines.append(f"  field {ext}: {x[2][ext]} vs {y[2][ext]}")
            break
    else:
        longer, extra = (name_a, na[len(nb):]) if len(na) > len(nb) else (name_b, nb[len(na):])
        lines.append(f"only {longer} has {len(extra)} more, first: {describe(extra[0])}")
    raise Failure(*lines)


def strip_urls(listing):
    return [(None, k, f) for _, k, f in listing]
