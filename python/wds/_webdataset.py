"""wds.WebDataset: webdataset's pipeline verbs over wds's tar reader.

A script written for Python webdataset moves by changing its import: the
same constructor (urls, resampled=, shardshuffle=, nodesplitter=,
workersplitter=, handler=, cache_dir=, seed=), the same fluid verbs with
webdataset's meanings (semantics taken from webdataset 1.0's sources and
tests; the code is ours), the shards read by wds.Reader (the C tar reader:
webdataset's key rules, compression, pipe:, http(s)://, s3://, the cache).

Deliberate differences (docs/migrate-webdataset.md lists them):
- a damaged shard (truncated, corrupt) raises wds.Error subclasses
  (wds.TruncatedError, wds.CorruptError, ...) given to handler= as
  webdataset gives tarfile's errors; a handler that continues goes on with
  the next shard: the damage is never passed over without the handler
  saying so;
- shardshuffle=None (webdataset warns) means no shard shuffle, as
  shardshuffle=False; seed=None draws a seed, as webdataset does;
- with_epoch(n) counts samples per DataLoader worker, as webdataset's: an
  epoch of n x num_workers samples per rank. wds.Dataset counts per rank.

Nothing here keeps wds's exact epochs or resume: that is wds.Dataset's (its
per-sample verbs .map, .map_dict, .map_tuple, .to_tuple, .rename, .decode,
.batched keep both).
"""

import copy
import gzip
import io
import itertools
import json
import os
import pickle
import random
import re
import sys
import time
import warnings

import numpy as np

try:
    from torch.utils.data import DataLoader as _DataLoader
    from torch.utils.data import IterableDataset as _Base
except ImportError:  # pragma: no cover - torch is wds[torch]
    _Base = object
    _DataLoader = None


# -- handlers (webdataset's names) -------------------------------------------
def reraise_exception(exn):
    """Handler: raise the exception (the default)."""
    raise exn


def ignore_and_continue(exn):
    """Handler: go on with the next sample (or shard)."""
    return True


def warn_and_continue(exn):
    """Handler: warn, then go on."""
    warnings.warn(repr(exn))
    time.sleep(0.5)
    return True


def ignore_and_stop(exn):
    """Handler: end the stream quietly."""
    return False


def warn_and_stop(exn):
    """Handler: warn, then end the stream."""
    warnings.warn(repr(exn))
    time.sleep(0.5)
    return False


class DecodingError(Exception):
    """A field failed to decode (webdataset's name): key, url, field."""

    def __init__(self, url=None, key=None, k=None, sample=None):
        super().__init__(f"decoding {k!r} of sample {key!r} from {url!r}")
        self.url, self.key, self.k, self.sample = url, key, k, sample


# -- splitters ------------------------------------------------------------------
def pytorch_worker_info(group=None):
    """(rank, world_size, worker, num_workers), as webdataset's."""
    rank, world = 0, 1
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            group = group or dist.group.WORLD
            rank, world = dist.get_rank(group=group), dist.get_world_size(group=group)
    worker, num_workers = 0, 1
    if torch is not None:
        info = torch.utils.data.get_worker_info()
        if info is not None:
            worker, num_workers = info.id, info.num_workers
    return rank, world, worker, num_workers


def split_by_node(src, group=None):
    """Shard URLs for this rank: every world_size-th from rank."""
    rank, world, _, _ = pytorch_worker_info(group=group)
    return itertools.islice(src, rank, None, world) if world > 1 else src


def single_node_only(src, group=None):
    """The default nodesplitter: refuses to run on several ranks."""
    _, world, _, _ = pytorch_worker_info(group=group)
    if world > 1:
        raise ValueError("you need to add an explicit nodesplitter to your "
                         "input pipeline for multi-node training "
                         "(nodesplitter=wds.split_by_node)")
    return src


def split_by_worker(src):
    """Shard URLs for this DataLoader worker."""
    _, _, worker, nw = pytorch_worker_info()
    return itertools.islice(src, worker, None, nw) if nw > 1 else src


# -- decoding ---------------------------------------------------------------------
def _pickle_loads(data):
    return pickle.loads(data)


def _npy(data):
    return np.load(io.BytesIO(data), allow_pickle=False)


def _npz(data):
    return dict(np.load(io.BytesIO(data), allow_pickle=False))


def _torch_loads(data):
    import torch

    return torch.load(io.BytesIO(data), weights_only=True)


def _msgpack(data):
    import msgpack

    return msgpack.unpackb(data, raw=False)


def _cbor(data):
    import cbor

    return cbor.loads(data)


def _text(data):
    return data.decode("utf-8")


_BASIC = {
    "txt": _text, "text": _text, "transcript": _text,
    "cls": int, "cls2": int, "index": int, "inx": int, "id": int,
    "json": json.loads, "jsn": json.loads,
    "pyd": _pickle_loads, "pickle": _pickle_loads, "pkl": _pickle_loads,
    "pth": _torch_loads, "npy": _npy, "npz": _npz,
    "mp": _msgpack, "msg": _msgpack, "cbor": _cbor,
}


def basichandlers(key, data):
    """The default decoders by the key's last extension (webdataset's)."""
    f = _BASIC.get(re.sub(r".*[.]", "", key))
    return None if f is None else f(data)


class Continue:
    """A handler's result: decode (key, data) further (as .gz does)."""

    def __init__(self, key, data):
        self.key, self.data = key, data


def gzfilter(key, data):
    if not key.endswith(".gz"):
        return None
    return Continue(key[:-3], gzip.decompress(data))


IMAGE_EXTENSIONS = "jpg jpeg png ppm pgm pbm pnm".split()

# webdataset's image specs: (array type, element type, mode)
imagespecs = {
    "l8": ("numpy", "uint8", "l"), "rgb8": ("numpy", "uint8", "rgb"),
    "rgba8": ("numpy", "uint8", "rgba"), "l": ("numpy", "float", "l"),
    "rgb": ("numpy", "float", "rgb"), "rgba": ("numpy", "float", "rgba"),
    "torchl8": ("torch", "uint8", "l"), "torchrgb8": ("torch", "uint8", "rgb"),
    "torchrgba8": ("torch", "uint8", "rgba"), "torchl": ("torch", "float", "l"),
    "torchrgb": ("torch", "float", "rgb"), "torch": ("torch", "float", "rgb"),
    "torchrgba": ("torch", "float", "rgba"), "pill": ("pil", None, "l"),
    "pil": ("pil", None, "rgb"), "pilrgb": ("pil", None, "rgb"),
    "pilrgba": ("pil", None, "rgba"),
}


class ImageHandler:
    """Decodes image extensions per a webdataset image spec ("rgb8", ...)."""

    def __init__(self, imagespec, extensions=IMAGE_EXTENSIONS):
        if imagespec not in imagespecs:
            raise ValueError(f"Unknown imagespec: {imagespec}")
        self.imagespec = imagespec
        self.extensions = set(extensions)

    def __call__(self, key, data):
        from PIL import Image

        if re.sub(r".*[.]", "", key).lower() not in self.extensions:
            return None
        atype, etype, mode = imagespecs[self.imagespec]
        with io.BytesIO(data) as stream:
            img = Image.open(stream)
            img.load()
        img = img.convert({"l": "L", "rgb": "RGB", "rgba": "RGBA"}[mode])
        if atype == "pil":
            return img
        a = np.array(img)  # writable: torch.from_numpy warns on a view
        if etype == "float":
            a = a.astype(np.float32) / 255.0
        if atype == "numpy":
            return a
        import torch

        t = torch.from_numpy(np.ascontiguousarray(a))
        return t.permute(2, 0, 1) if t.ndim == 3 else t.unsqueeze(0)


def imagehandler(imagespec, extensions=IMAGE_EXTENSIONS):
    return ImageHandler(imagespec, extensions)


def handle_extension(extensions, f):
    """A decoder calling f(data) for keys ending in one of extensions (a
    space-separated str; an extension may have dots)."""
    exts = [e.lower().split(".") for e in extensions.split()]

    def handler(key, data):
        parts = key.lower().split(".")
        for t in exts:
            if len(t) <= len(parts) and parts[-len(t):] == t:
                return f(data)
        return None

    return handler


class Decoder:
    """webdataset's Decoder: handlers tried in order per field (gz first,
    the basic ones last); the first result that is not None wins; fields
    nothing decodes stay bytes; keys starting with "__" are kept."""

    def __init__(self, handlers, pre=None, post=None, only=None,
                 partial=False):
        if isinstance(only, str):
            only = only.split()
        self.only = None if only is None else set(only)
        pre = [gzfilter] if pre is None else pre
        post = [basichandlers] if post is None else post
        for h in handlers + pre + post:
            if not callable(h):
                raise TypeError(f"decode: {h!r} is not callable")
        self.handlers = pre + handlers + post
        self.partial = partial

    def decode1(self, key, data):
        key = "." + key
        for f in self.handlers:
            r = f(key, data)
            if isinstance(r, Continue):
                key, data = r.key, r.data
                continue
            if r is not None:
                return r
        return data

    def __call__(self, sample):
        out = {}
        for k, v in sample.items():
            if k.startswith("__") or (self.only is not None
                                      and k not in self.only) or \
                    (self.partial and not isinstance(v, bytes)):
                out[k] = v
                continue
            try:
                out[k] = self.decode1(k, v)
            except Exception as exn:
                raise DecodingError(url=sample.get("__url__"),
                                    key=sample.get("__key__"), k=k,
                                    sample=sample) from exn
        return out


# -- pipeline stages (picklable: classes, not closures) ------------------------
def getfirst(a, keys, default=None, missing_is_error=True):
    if isinstance(keys, str):
        keys = keys.split(";")
    for k in keys:
        if k in a:
            return a[k]
    if missing_is_error:
        raise ValueError(f"didn't find {keys} in {list(a.keys())}")
    return default


class _Stage:
    def __repr__(self):
        return f"<{type(self).__name__.lstrip('_')}>"


class _Map(_Stage):
    def __init__(self, f, handler):
        self.f, self.handler = f, handler

    def __call__(self, data):
        for s in data:
            try:
                r = self.f(s)
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            if r is None:
                continue
            if isinstance(s, dict) and isinstance(r, dict):
                r.setdefault("__key__", s.get("__key__"))  # webdataset's
            yield r


class _Decode(_Stage):
    def __init__(self, args, handler, kw):
        self.decoder = Decoder([imagehandler(a) if isinstance(a, str) else a
                                for a in args], **kw)
        self.handler = handler

    def __call__(self, data):
        for s in data:
            try:
                r = self.decoder(s)
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            yield r


class _ToTuple(_Stage):
    def __init__(self, args, handler, missing_is_error, none_is_error):
        if len(args) == 1 and isinstance(args[0], str) and " " in args[0]:
            args = args[0].split()
        self.args, self.handler = args, handler
        self.missing = missing_is_error
        self.none = missing_is_error if none_is_error is None else none_is_error

    def __call__(self, data):
        for s in data:
            try:
                r = tuple(getfirst(s, f, missing_is_error=self.missing)
                          for f in self.args)
                if self.none and any(x is None for x in r):
                    raise ValueError(f"to_tuple {self.args} got {s.keys()}")
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            yield r


class _MapDict(_Stage):
    def __init__(self, handler, kw):
        self.handler, self.kw = handler, kw

    def __call__(self, data):
        for s in data:
            try:
                for k, f in self.kw.items():
                    s[k] = f(s[k])
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            yield s


class _MapTuple(_Stage):
    def __init__(self, fs, handler):
        self.fs, self.handler = fs, handler

    def __call__(self, data):
        for s in data:
            try:
                s = list(s)
                if len(self.fs) > len(s):
                    raise ValueError(f"map_tuple: {len(self.fs)} functions "
                                     f"for a tuple of {len(s)}")
                for i, f in enumerate(self.fs):
                    if f is not None:
                        s[i] = f(s[i])
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            yield tuple(s)


class _Rename(_Stage):
    def __init__(self, handler, keep, kw):
        self.handler, self.keep, self.kw = handler, keep, kw

    def __call__(self, data):
        for s in data:
            try:
                new = {k: getfirst(s, v) for k, v in self.kw.items()}
                if self.keep:
                    gone = {x for v in self.kw.values()
                            for x in (v.split(";") if isinstance(v, str) else v)}
                    r = {k: v for k, v in s.items() if k not in gone}
                    r.update(new)
                else:
                    r = new
            except Exception as exn:
                if self.handler(exn):
                    continue
                break
            yield r


class _Select(_Stage):
    def __init__(self, pred):
        self.pred = pred

    def __call__(self, data):
        return (s for s in data if self.pred(s))


class _Shuffle(_Stage):
    def __init__(self, bufsize, initial, seed):
        self.bufsize, self.initial, self.seed = bufsize, initial, seed

    def __call__(self, data):
        if self.bufsize <= 1:
            yield from data
            return
        rng = random.Random(self.seed if self.seed is not None
                            else int((os.getpid() + time.time()) * 1e9))
        initial = min(self.initial, self.bufsize)
        buf = []
        for s in data:
            buf.append(s)
            if len(buf) >= self.bufsize or len(buf) >= initial:
                i = rng.randrange(len(buf))
                buf[i], buf[-1] = buf[-1], buf[i]
                yield buf.pop()
        rng.shuffle(buf)
        yield from buf


def default_collation_fn(samples, combine_tensors=True, combine_scalars=True):
    """webdataset's default collation: per key (or tuple position) numbers
    into a numpy array, same-shape tensors stacked, arrays into one array,
    anything else a list."""
    rows = [s if isinstance(s, dict) else dict(enumerate(s)) for s in samples]
    keys = set(rows[0])
    for r in rows[1:]:
        if set(r) != keys:
            raise ValueError("keys don't match in different samples")
    out = {k: _combine([r[k] for r in rows], combine_tensors, combine_scalars)
           for k in keys}
    if isinstance(samples[0], (list, tuple)):
        return tuple(out[i] for i in range(len(out)))
    return out


def _combine(b, tensors, scalars):
    torch = sys.modules.get("torch")
    if isinstance(b[0], (int, float)):
        return np.array(b) if scalars else b
    if torch is not None and isinstance(b[0], torch.Tensor):
        if not tensors:
            return b
        if len({x.shape for x in b}) != 1:
            raise ValueError(f"all shapes must be equal in collation, got "
                             f"{sorted({tuple(x.shape) for x in b})}")
        return torch.stack(b)
    if isinstance(b[0], np.ndarray):
        if not tensors:
            return b
        if len({x.shape for x in b}) != 1:
            raise ValueError(f"all shapes must be equal in collation, got "
                             f"{sorted({x.shape for x in b})}")
        return np.array(b)
    return list(b)


class _Batched(_Stage):
    def __init__(self, n, collation_fn, partial):
        self.n, self.collation_fn, self.partial = n, collation_fn, partial

    def __call__(self, data):
        buf = []
        for s in data:
            buf.append(s)
            if len(buf) == self.n:
                yield self.collation_fn(buf) if self.collation_fn else buf
                buf = []
        if buf and self.partial:
            yield self.collation_fn(buf) if self.collation_fn else buf


class _Unbatched(_Stage):
    def __call__(self, data):
        for b in data:
            if isinstance(b, (list, tuple)):
                for i in range(len(b[0])):
                    yield tuple(x[i] for x in b)
            elif isinstance(b, dict):
                ns = {len(v) for v in b.values()}
                if len(ns) != 1:
                    raise ValueError(f"unbatched: fields of lengths {ns}")
                for i in range(ns.pop()):
                    yield {k: v[i] for k, v in b.items()}
            else:
                raise ValueError(f"unbatched: unknown batch type {type(b)}")


class _Slice(_Stage):
    def __init__(self, args):
        self.args = args

    def __call__(self, data):
        return itertools.islice(data, *self.args)


class _RSample(_Stage):
    def __init__(self, p):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"rsample: p={p!r} is not a probability")
        self.p = p

    def __call__(self, data):
        return (s for s in data if random.uniform(0.0, 1.0) < self.p)


class FluidInterface:
    """webdataset's fluid verbs; each returns a new pipeline (.with_epoch,
    .with_length and .repeat change this one, as webdataset's)."""

    def compose(self, *stages):
        raise NotImplementedError

    def batched(self, batchsize, collation_fn=default_collation_fn,
                partial=True):
        return self.compose(_Batched(batchsize, collation_fn, partial))

    def unbatched(self):
        return self.compose(_Unbatched())

    def shuffle(self, size, initial=100, seed=None, **kw):
        if size < 1:
            return self
        return self.compose(_Shuffle(size, initial, seed))

    def map(self, f, handler=reraise_exception):
        return self.compose(_Map(f, handler))

    def decode(self, *args, handler=reraise_exception, **kw):
        return self.compose(_Decode(args, handler, kw))

    def map_dict(self, handler=reraise_exception, **kw):
        return self.compose(_MapDict(handler, kw))

    def select(self, predicate, **kw):
        return self.compose(_Select(predicate))

    def to_tuple(self, *args, handler=reraise_exception,
                 missing_is_error=True, none_is_error=None):
        return self.compose(_ToTuple(args, handler, missing_is_error,
                                     none_is_error))

    def map_tuple(self, *args, handler=reraise_exception):
        return self.compose(_MapTuple(args, handler))

    def rename(self, handler=reraise_exception, keep=True, **kw):
        return self.compose(_Rename(handler, keep, kw))

    def slice(self, *args):
        return self.compose(_Slice(args))

    def rsample(self, p=0.5):
        return self.compose(_RSample(p))


# Stages for DataPipeline(source, stage, ...), as webdataset's filters.
def batched(batchsize, collation_fn=default_collation_fn, partial=True):
    return _Batched(batchsize, collation_fn, partial)


def unbatched():
    return _Unbatched()


def shuffle(bufsize=1000, initial=100, seed=None):
    return _Shuffle(bufsize, initial, seed)


def decode(*args, handler=reraise_exception, **kw):
    return _Decode(args, handler, kw)


def to_tuple(*args, handler=reraise_exception, missing_is_error=True,
             none_is_error=None):
    return _ToTuple(args, handler, missing_is_error, none_is_error)


def map_dict(handler=reraise_exception, **kw):
    return _MapDict(handler, kw)


def map_tuple(*args, handler=reraise_exception):
    return _MapTuple(args, handler)


def rename(handler=reraise_exception, keep=True, **kw):
    return _Rename(handler, keep, kw)


def select(predicate):
    return _Select(predicate)


class DataPipeline(_Base, FluidInterface):
    """A source stage and stages applied in order (webdataset's)."""

    def __init__(self, *stages):
        super().__init__()
        self.pipeline = list(stages)
        self.nsamples = -1
        self.repetitions = 1

    def compose(self, *stages):
        c = copy.copy(self)
        c.pipeline = self.pipeline + list(stages)
        return c

    def append(self, stage):
        self.pipeline.append(stage)

    def iterator1(self):
        src = self.pipeline[0]
        it = iter(src) if hasattr(src, "__iter__") else src()
        for stage in self.pipeline[1:]:
            it = stage(it)
        return it

    def iterator(self):
        for _ in range(self.repetitions):
            count = 0
            for s in self.iterator1():
                yield s
                count += 1
            if count == 0:
                break  # an empty dataset does not loop

    def __iter__(self):
        if self.repetitions != 1 and self.nsamples > 0:
            return itertools.islice(self.iterator(), self.nsamples)
        return self.iterator()

    def with_length(self, n, silent=False):
        """len() gives n (for frameworks that ask); the epoch is unchanged."""
        if not silent:
            warnings.warn(".with_length() only sets the value of __len__; "
                          "it does not change the number of samples")
        self.size = n
        return self

    def __len__(self):
        if getattr(self, "size", None) is None:
            raise TypeError("len(WebDataset): not known (.with_length(n) "
                            "sets it)")
        return self.size

    def with_epoch(self, nsamples=-1, nbatches=-1):
        """Each iteration yields nsamples (or nbatches) items, repeating the
        data as needed: counted per DataLoader worker, as webdataset's."""
        self.repetitions = sys.maxsize
        self.nsamples = max(nsamples, nbatches)
        return self

    def repeat(self, nepochs=-1, nbatches=-1):
        """nepochs passes (forever if not given), cut at nbatches items."""
        self.repetitions = nepochs if nepochs > 0 else sys.maxsize
        self.nsamples = nbatches
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Shards:
    """The source: shard URLs split by node and worker, shuffled, read
    with wds.Reader; samples {"__key__", "__url__", EXT: bytes}."""

    def __init__(self, urls, resampled, shardshuffle, seed, nodesplitter,
                 workersplitter, handler, reader_options, empty_check):
        self.urls = urls
        self.resampled = resampled
        self.shardshuffle = shardshuffle
        self.seed = seed
        self.nodesplitter = nodesplitter
        self.workersplitter = workersplitter
        self.handler = handler
        self.reader_options = reader_options
        self.empty_check = empty_check

    def _list(self):
        from ._wds import expand

        if isinstance(self.urls, str):
            return expand(self.urls)
        return [u for x in self.urls for u in expand(x)]

    def _resampled(self, urls):
        rank, _, worker, _ = pytorch_worker_info()
        rng = random.Random(f"{self.seed}/{rank}/{worker}/{os.getpid()}"
                            if self.seed is None else
                            f"{self.seed}/{rank}/{worker}")
        while True:
            yield rng.choice(urls)

    def __call__(self):
        urls = self._list()
        src = self._resampled(urls) if self.resampled else iter(urls)
        if self.nodesplitter is not None:
            src = self.nodesplitter(src)
        if self.workersplitter:
            src = self.workersplitter(src)
        if not self.resampled and self.shardshuffle:
            src = _Shuffle(int(self.shardshuffle), int(self.shardshuffle),
                           self.seed)(iter(src))
        n = 0
        for url in src:
            for s in self._read(url):
                n += 1
                yield s
        if n == 0 and self.empty_check:
            raise ValueError("No samples found in dataset; perhaps you have "
                             "fewer shards than workers.\nTurn off using "
                             "empty_check=False in the WebDataset "
                             "constructor.")

    def _read(self, url):
        """One shard's samples. A failure goes to the handler: True goes on
        with the next shard (the rest of this one is not trusted), False
        ends the stream (_Stop), an exception it raises propagates."""
        from ._wds import Reader

        try:
            r = Reader([url], **self.reader_options)
        except Exception as exn:
            if self.handler(exn):
                return
            raise _Stop() from None
        with r:
            while True:
                try:
                    s = next(r)
                except StopIteration:
                    return
                except Exception as exn:
                    if self.handler(exn):
                        return
                    raise _Stop() from None
                yield s


class _Stop(Exception):
    pass


class _Guard:
    """Ends the stream quietly where a handler said stop."""

    def __init__(self, source):
        self.source = source

    def __call__(self):
        try:
            yield from self.source()
        except _Stop:
            return


class WebDataset(DataPipeline):
    """WebDataset(urls, handler=reraise_exception, resampled=False,
    repeat=False, shardshuffle=None, cache_size=0, cache_dir=None,
    nodesplitter=single_node_only, workersplitter=split_by_worker,
    empty_check=True, seed=None, **reader_options)

    webdataset's WebDataset over wds's reader (see the module): urls a
    spec ("data-{000..099}.tar", "a.tar::b.tar"), a list of them, or
    URLs; reader_options are wds.Reader's (read_timeout_ms, retries, ...).
    """

    def __init__(self, urls, handler=reraise_exception, mode=None,
                 resampled=False, repeat=False, shardshuffle=None,
                 cache_size=0, cache_dir=None, url_to_name=None,
                 detshuffle=False, nodesplitter=single_node_only,
                 workersplitter=split_by_worker, select_files=None,
                 rename_files=None, empty_check=True, verbose=False,
                 seed=None, **reader_options):
        super().__init__()
        if select_files is not None or rename_files is not None:
            raise TypeError("WebDataset: select_files=/rename_files= are not "
                            "supported (use .map or .rename on samples)")
        if mode == "resampled":
            resampled = True
        if shardshuffle is True:
            warnings.warn("set WebDataset(shardshuffle=...) to a positive "
                          "integer or 0 or False")
            shardshuffle = 100
        if cache_dir is not None:
            cache_dir = os.path.expanduser(os.fspath(cache_dir))
            if not os.path.isdir(cache_dir):
                raise ValueError(f"cache directory {cache_dir} does not exist")
            reader_options["cache_dir"] = cache_dir
            if cache_size and cache_size > 0:
                reader_options["cache_size"] = int(cache_size)
        self.seed = (random.randint(0, 1000000) if seed is None else seed)
        source = _Shards(urls, resampled, shardshuffle, self.seed,
                         nodesplitter, workersplitter, handler,
                         reader_options, empty_check)
        self.append(_Guard(source))
        if repeat:
            self.repetitions = sys.maxsize


class WebLoader(FluidInterface):
    """webdataset's WebLoader: a torch DataLoader with the fluid verbs,
    applied to what the DataLoader yields (batches). Arguments are the
    DataLoader's."""

    def __init__(self, *args, **kw):
        if _DataLoader is None:
            raise ImportError("wds.WebLoader needs torch")
        self._pipe = DataPipeline(_LoaderSource(_DataLoader(*args, **kw)))

    def compose(self, *stages):
        c = copy.copy(self)
        c._pipe = self._pipe.compose(*stages)
        return c

    def __iter__(self):
        return iter(self._pipe)

    def with_epoch(self, nsamples=-1, nbatches=-1):
        self._pipe.with_epoch(nsamples, nbatches)
        return self

    def repeat(self, nepochs=-1, nbatches=-1):
        self._pipe.repeat(nepochs, nbatches)
        return self

    def with_length(self, n, silent=False):
        self._pipe.with_length(n, silent)
        return self

    def __len__(self):
        return len(self._pipe)


class _LoaderSource:
    def __init__(self, loader):
        self.loader = loader

    def __call__(self):
        return iter(self.loader)
