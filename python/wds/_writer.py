"""wds.ShardWriter: webdataset's ShardWriter over the C shard writer."""

import gzip
import io
import json
import numbers
import os
import pickle
import re
import subprocess
import warnings

from ._wds import CommandError, InvalidError, _Writer

_COMPRESSION = {None: 0, "auto": 0, False: 1, "none": 1, "zst": 2, "zstd": 2,
                True: 3, "gz": 3, "gzip": 3}


# ---- encoding: by extension as webdataset's writer, else by type ----------

def _image(value, fmt):
    """An image array (uint8, or float in [0, 1]; HxW, HxWx1 or HxWx3) or a
    PIL image, encoded by PIL as webdataset's imageencoder does."""
    try:
        import PIL.Image
    except ImportError:
        raise ImportError(f"ShardWriter: encoding an image as {fmt} needs "
                          "PIL (pip install pillow)") from None
    if not isinstance(value, PIL.Image.Image):
        import numpy as np

        a = np.asarray(value)
        if a.dtype in (np.float32, np.float64):
            if a.size and (a.min() <= -0.001 or a.max() >= 1.001):
                raise ValueError(f"ShardWriter: a float image is in [0, 1], "
                                 f"not [{a.min()}, {a.max()}]")
            a = np.array(np.clip(a, 0.0, 1.0) * 255.0, "uint8")
        if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (1, 3)):
            raise ValueError(f"ShardWriter: an image is HxW, HxWx1 or HxWx3, "
                             f"not {a.shape}")
        value = PIL.Image.fromarray(a)
    opts = {"quality": 100} if fmt in ("JPEG", "TIFF") else {}
    with io.BytesIO() as out:
        value.save(out, format=fmt, **opts)
        return out.getvalue()


def _npy(value):
    import numpy as np

    out = io.BytesIO()
    np.save(out, np.asanyarray(value), allow_pickle=False)
    return out.getvalue()


def _npz(value):
    import numpy as np

    if not isinstance(value, dict) or not all(isinstance(k, str)
                                              for k in value):
        raise TypeError("ShardWriter: an npz field is a dict of str to arrays")
    out = io.BytesIO()
    np.savez_compressed(out, **{k: np.asarray(v) for k, v in value.items()})
    return out.getvalue()


def _msgpack(value):
    try:
        import msgpack
    except ImportError:
        raise ImportError("ShardWriter: an mp/msgpack field needs msgpack "
                          "(pip install msgpack)") from None
    return msgpack.packb(value)


def _cbor(value):
    try:
        import cbor
    except ImportError:
        raise ImportError("ShardWriter: a cbor field needs cbor "
                          "(pip install cbor)") from None
    return cbor.dumps(value)


def _torch(value):
    import torch

    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


# tenbin (webdataset/tenbin.py): per array a header chunk (dtype, info,
# ndim, dims as int64) and a data chunk, each chunk "~TenBin~", its length
# (int64) and its bytes padded to 64. The dtypes webdataset reads back.
_TENBIN_DTYPES = {"float16": "f2", "float32": "f4", "float64": "f8",
                  "int8": "i1", "int16": "i2", "int32": "i4", "int64": "i8",
                  "uint8": "u1", "uint16": "u2", "uint64": "u8"}


def _tenbin(value):
    import numpy as np

    def chunk(b):
        pad = -len(b) % 64
        return (b"~TenBin~" + len(b).to_bytes(8, "little", signed=True) + b
                + b"\0" * pad)

    def s64(s):
        return int.from_bytes(s.encode("ascii").ljust(8, b"\0"), "little",
                              signed=True)

    out = []
    for a in value if isinstance(value, list) else [value]:
        a = np.ascontiguousarray(a)
        short = _TENBIN_DTYPES.get(a.dtype.name)
        if short is None or a.ndim >= 10:
            raise ValueError(f"ShardWriter: tenbin cannot hold {a.dtype} "
                             f"arrays of {a.ndim} dimensions")
        header = np.array([s64(short), s64(""), a.ndim, *a.shape], "<i8")
        out += [chunk(header.tobytes()), chunk(a.tobytes())]
    return b"".join(out)


def _text(value):
    return (value if isinstance(value, str) else str(value)).encode("utf-8")


def _handlers():
    """Extension -> encoder, webdataset's make_handlers()."""
    h = {}

    def add(names, fn):
        for n in names.split():
            h[n] = fn

    add("cls cls2 class count index inx id", lambda x: str(x).encode("ascii"))
    add("txt text transcript html htm", _text)
    add("pyd pickle", pickle.dumps)
    add("pth", _torch)
    add("npy", _npy)
    add("npz", _npz)
    add("ten tenbin tb", _tenbin)
    add("json jsn", lambda x: json.dumps(x).encode("utf-8"))
    add("mp msgpack msg", _msgpack)
    add("cbor", _cbor)
    add("jpg jpeg img image", lambda x: _image(x, "JPEG"))
    add("png", lambda x: _image(x, "PNG"))
    # PIL's PPM writer: P4 (mode 1), P5 (L), P6 (RGB) by the image's mode.
    add("pbm pgm ppm", lambda x: _image(x, "PPM"))
    add("tif tiff", lambda x: _image(x, "TIFF"))
    return h


_HANDLERS = _handlers()


def _by_type(ext, value):
    """The by-type rule, where the extension says nothing: int and float as
    their decimal text, dict and list as JSON, numpy arrays as .npy."""
    if isinstance(value, bool):
        return str(int(value)).encode()
    if isinstance(value, numbers.Integral):
        return str(int(value)).encode()
    if isinstance(value, numbers.Real):
        return repr(float(value)).encode()
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value).encode("utf-8")
    if type(value).__module__ == "numpy" and hasattr(value, "dtype"):
        return _npy(value)
    raise TypeError(
        f"ShardWriter: field {ext!r}: cannot encode {type(value).__name__} "
        "(bytes, str, int, float, dict, list or a numpy array; or name an "
        "extension that says how: jpg, png, npy, pyd, ...)")


def encode_value(ext, value):
    """The bytes written for the field ext, as webdataset's writer encodes
    them: bytes as they are and str as UTF-8 whatever the extension; other
    values by the extension's last part (jpg/jpeg/img/image as JPEG, png,
    ppm/pgm/pbm, tiff: the image array or PIL image encoded by PIL;
    pyd/pickle: pickled; npy, npz, json, txt, cls, ten, mp/msgpack, cbor,
    pth), then by type where the extension says nothing. A name ending in .gz is gzipped after the
    inner extension's encoding ("txt.gz", "npy.gz")."""
    compress = ext.endswith(".gz")
    name = ext[:-3] if compress else ext
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
    elif isinstance(value, str):
        data = value.encode("utf-8")
    else:
        handler = _HANDLERS.get(re.sub(r".*\.", "", name).lower())
        data = handler(value) if handler else _by_type(ext, value)
        data = bytes(data)
    if compress:
        data = gzip.compress(data, mtime=0)
    return data


# ---- pipe: targets ------------------------------------------------------

def _pipe_like(pattern):
    """Whether a str target is a pipe: target webdataset would run, or looks
    like one (spaces before it, another case) without being one."""
    return re.match(r"\s*pipe:", pattern, re.IGNORECASE) is not None


class _PipeShard:
    """One shard's command: /bin/sh -c CMD, its stdin the tar stream (as
    webdataset's gopen runs a pipe: target). A non-zero exit status is a
    wds.CommandError naming the command."""

    def __init__(self, command):
        self.command = command
        # Its own process group: the terminal's Ctrl-C reaches Python, which
        # decides, as for the C reader's pipe: sources.
        self.proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE,
                                     start_new_session=True)

    def fileno(self):
        return self.proc.stdin.fileno()

    def finish(self, abort=False):
        """Closes the command's stdin and waits for it; abort: stops it."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if abort:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            return
        status = self.proc.wait()
        if status != 0:
            what = (f"killed by signal {-status}" if status < 0
                    else f"exit status {status}")
            raise CommandError(f"pipe:{self.command}: {what}")


def _tar_size(key, fields):
    """The tar bytes a sample takes: per member a header block (and a pax
    header for a name over 100 bytes) and its data padded to 512."""
    n = 0
    for ext, data in fields:
        name = len(f"{key}.{ext}".encode("utf-8", "surrogateescape"))
        n += 512 + (1024 if name > 100 else 0) + -(-len(data) // 512) * 512
    return n


class ShardWriter:
    """ShardWriter(pattern, maxcount=100000, maxsize=3e9, compress=None, *,
    start_shard=0, level=0, mtime=0, sync=True)

    Writes samples into a numbered series of shards, as webdataset's
    ShardWriter does: pattern is a printf pattern ("out/shard-%06d.tar"), a
    new shard starts when the next sample would take the current one past
    maxcount samples or maxsize bytes. compress: None (from the name: .tar,
    .tar.gz, .tar.zst), False, True or "gz", "zst". write(sample) takes a
    dict with "__key__" and fields, encoded as webdataset's writer encodes
    them (encode_value: by extension, jpg/png/... image arrays as images,
    pyd pickled, .gz gzipped, ...; by type where the extension says
    nothing); keys starting with "_" are not written, so wds.Reader's
    samples can be written back as they are. Each shard is written under a
    temporary name, synced and renamed when complete (the C writer,
    wds/writer.h): output is deterministic.

    A pattern "pipe:CMD" runs each shard's CMD (pattern % shard number) with
    /bin/sh, the tar stream on its stdin, as webdataset does
    ("pipe:gsutil cp - gs://b/s-%06d.tar"); a non-zero exit status raises
    wds.CommandError. Give pipe: patterns only from code you trust: they
    are shell commands. A target that looks like one but is not (" pipe:",
    "PIPE:") is refused, never created as a file.

    A context manager; close() finishes the last shard. Errors raise
    wds.Error subclasses.
    """

    def __init__(self, pattern, maxcount=100000, maxsize=3e9, compress=None, *,
                 start_shard=0, level=0, mtime=0, sync=True):
        key = compress.lower() if isinstance(compress, str) else compress
        if key not in _COMPRESSION:
            raise ValueError(f"ShardWriter: compress={compress!r}: None, False, "
                             "True, 'gz' or 'zst'")
        if maxsize is None or maxsize == float("inf"):
            maxsize = 2**64 - 1
        self.pattern = pattern
        self.maxcount = int(maxcount)
        self.maxsize = int(maxsize)
        self._opts = dict(compression=_COMPRESSION[key], level=int(level),
                          mtime=int(mtime), sync=bool(sync))
        self._pipe = None
        target = os.fspath(pattern)
        if isinstance(target, str) and _pipe_like(target):
            if not target.startswith("pipe:"):
                raise InvalidError(
                    f"ShardWriter: {target!r} looks like a pipe: target but "
                    "is not one (a pipe: target starts with exactly "
                    "\"pipe:\"); refused rather than created as a file")
            self._pipe = target[5:]
            self._next = int(start_shard)
            self._shard = None  # (_PipeShard, _Writer) of the current shard
            self._count = 0
            self._done = dict(shards=0, samples=0, members=0, tar_bytes=0,
                              out_bytes=0)
            self._closed = False
            return
        self._w = _Writer(pattern, maxcount=self.maxcount, maxsize=self.maxsize,
                          start_shard=int(start_shard), **self._opts)

    def write(self, sample):
        if not isinstance(sample, dict):
            raise TypeError("ShardWriter.write: a sample is a dict")
        if "__key__" not in sample:
            raise ValueError("ShardWriter.write: the sample has no __key__")
        key = sample["__key__"]
        if isinstance(key, bytes):
            key = key.decode("utf-8", "surrogateescape")
        if not isinstance(key, str):
            raise TypeError("ShardWriter.write: __key__ must be a str")
        fields = [(ext, encode_value(ext, value))
                  for ext, value in sample.items()
                  if not ext.startswith("_")]
        if self._pipe is None:
            self._w.write(key, fields)
        else:
            self._pipe_write(key, fields)

    # -- pipe: targets: one command and one C writer (on its stdin) a shard

    def _command(self, n):
        try:
            return self._pipe % n
        except TypeError:  # no conversion: one shard only
            return None

    def _pipe_check(self):
        if self._closed:
            raise ValueError("I/O operation on a closed ShardWriter")

    def _pipe_write(self, key, fields):
        self._pipe_check()
        if self._shard is not None:
            st = self._shard[1].stats()
            # The C writer's rule: the finished shard (end blocks and record
            # padding included) would pass maxsize, or maxcount is reached.
            after = -(-(st["tar_bytes"] + _tar_size(key, fields) + 1024)
                      // 10240) * 10240
            if self._count >= self.maxcount or after > self.maxsize:
                if self._command(0) is None:
                    raise InvalidError(
                        f"ShardWriter: pipe:{self._pipe}: a second shard "
                        "needs a shard number in the command (%d, %06d)")
                self.next_stream()
        if self._shard is None:
            cmd = self._command(self._next)
            shard = _PipeShard(self._pipe if cmd is None else cmd)
            try:
                w = _Writer(None, out_fd=shard.fileno(),
                            **self._pipe_writer_opts(cmd or self._pipe))
            except BaseException:
                shard.finish(abort=True)
                raise
            self._shard = (shard, w)
            self._next += 1
            self._count = 0
        self._shard[1].write(key, fields)
        self._count += 1

    def _pipe_writer_opts(self, cmd):
        o = dict(self._opts)
        o.pop("sync")
        if o["compression"] == 0:  # from the name, as webdataset's tarmode
            c = cmd.rstrip()
            o["compression"] = (2 if c.endswith((".zst", ".tzst")) else
                                3 if c.endswith((".gz", ".tgz")) else 1)
        return o

    def _pipe_end(self, abort=False):
        if self._shard is None:
            return
        shard, w = self._shard
        self._shard = None
        try:
            if abort:
                w.abort()
            else:
                st = w.close()
                for k in ("samples", "members", "tar_bytes", "out_bytes"):
                    self._done[k] += st[k]
        except BaseException:
            shard.finish(abort=True)
            raise
        shard.finish(abort=abort)
        if not abort:
            self._done["shards"] += 1

    def next_stream(self):
        """Finishes the current shard now; the next sample starts another."""
        if self._pipe is None:
            self._w.end_shard()
        else:
            self._pipe_check()
            self._pipe_end()

    def stats(self):
        """shards (completed), samples, members, tar_bytes, out_bytes."""
        if self._pipe is None:
            return self._w.stats()
        out = dict(self._done)
        if self._shard is not None:
            st = self._shard[1].stats()
            for k in ("samples", "members", "tar_bytes", "out_bytes"):
                out[k] += st[k]
        return out

    @property
    def closed(self):
        return self._closed if self._pipe is not None else self._w.closed

    def close(self):
        """Finishes the last shard; returns the final stats. Shards of the
        pattern numbered after the last one written (an earlier, longer
        run's, which a spec of the pattern would read with these) are named
        in a warning (not deleted)."""
        if self._pipe is not None:
            if self._closed:
                return None
            self._closed = True
            self._pipe_end()
            return dict(self._done)
        st = self._w.close()
        left = st.pop("leftover", None) if st else None
        if left:
            n, first, last = left
            which = first if n == 1 else f"{n} shards, {first} to {last}"
            warnings.warn(f"ShardWriter: {which}: left by an earlier run "
                          f"after the last shard written to "
                          f"{self.pattern!r}; a spec of the pattern would "
                          f"read {'it' if n == 1 else 'them'} with these",
                          stacklevel=2)
        return st

    def abort(self):
        """Discards the unfinished shard (completed shards stay)."""
        if self._pipe is None:
            self._w.abort()
        elif not self._closed:
            self._closed = True
            self._pipe_end(abort=True)

    def __enter__(self):
        return self

    def __repr__(self):
        if self.closed:
            return f"<wds.ShardWriter {self.pattern!r} closed>"
        try:
            st = self.stats()
        except Exception:
            st = None
        done = "" if not st else (f" shards={st.get('shards')} "
                                  f"samples={st.get('samples')}")
        return (f"<wds.ShardWriter {self.pattern!r} maxcount={self.maxcount} "
                f"maxsize={self.maxsize}{done}>")

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not self.closed:
            # The block failed: finish what was written so far, as
            # webdataset does, but do not hide the block's exception.
            try:
                self.close()
            except Exception:
                self.abort()
            return False
        self.close()
        return False
