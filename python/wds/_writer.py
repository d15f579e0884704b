"""wds.ShardWriter: webdataset's ShardWriter over the C shard writer."""

import io
import json
import numbers
import warnings

from ._wds import _Writer

_COMPRESSION = {None: 0, "auto": 0, False: 1, "none": 1, "zst": 2, "zstd": 2,
                True: 3, "gz": 3, "gzip": 3}


def encode_value(ext, value):
    """The bytes written for one field, by the value's type (webdataset's
    defaults): bytes as they are, str as UTF-8, int and float as their
    decimal text, dict and list as JSON, numpy arrays as .npy."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bool):
        return str(int(value)).encode()
    if isinstance(value, numbers.Integral):
        return str(int(value)).encode()
    if isinstance(value, numbers.Real):
        return repr(float(value)).encode()
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value).encode("utf-8")
    if type(value).__module__ == "numpy" and hasattr(value, "dtype"):
        import numpy as np

        buf = io.BytesIO()
        np.save(buf, np.asanyarray(value), allow_pickle=False)
        return buf.getvalue()
    raise TypeError(
        f"ShardWriter: field {ext!r}: cannot encode {type(value).__name__} "
        "(bytes, str, int, float, dict, list or a numpy array)")


class ShardWriter:
    """ShardWriter(pattern, maxcount=100000, maxsize=3e9, compress=None, *,
    start_shard=0, level=0, mtime=0, sync=True)

    Writes samples into a numbered series of shards, as webdataset's
    ShardWriter does: pattern is a printf pattern ("out/shard-%06d.tar"), a
    new shard starts when the next sample would take the current one past
    maxcount samples or maxsize bytes. compress: None (from the name: .tar,
    .tar.gz, .tar.zst), False, True or "gz", "zst". write(sample) takes a
    dict with "__key__" and fields (bytes, str, int, float, dict or list as
    JSON, numpy arrays as .npy); keys starting with "_" are not written, so
    wds.Reader's samples can be written back as they are. Each shard is
    written under a temporary name, synced and renamed when complete (the C
    writer, wds/writer.h): output is deterministic. A context manager;
    close() finishes the last shard. Errors raise wds.Error subclasses.
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
        self._w = _Writer(pattern, maxcount=self.maxcount, maxsize=self.maxsize,
                          compression=_COMPRESSION[key], level=int(level),
                          start_shard=int(start_shard), mtime=int(mtime),
                          sync=bool(sync))

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
        self._w.write(key, fields)

    def next_stream(self):
        """Finishes the current shard now; the next sample starts another."""
        self._w.end_shard()

    def stats(self):
        """shards (completed), samples, members, tar_bytes, out_bytes."""
        return self._w.stats()

    @property
    def closed(self):
        return self._w.closed

    def close(self):
        """Finishes the last shard; returns the final stats. Shards of the
        pattern numbered after the last one written (an earlier, longer
        run's, which a spec of the pattern would read with these) are named
        in a warning (not deleted)."""
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
        self._w.abort()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and not self._w.closed:
            # The block failed: finish what was written so far, as
            # webdataset does, but do not hide the block's exception.
            try:
                self._w.close()
            except Exception:
                self._w.abort()
            return False
        self.close()
        return False
