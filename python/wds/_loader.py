"""wds.Loader and wds.Batch over the C loader (wds/loader.h); Loader's
docstring ends with its options, made at import from the library's option
table (_option_doc), as wds.Dataset's."""

import collections.abc
import operator
import os
import re
import textwrap

from . import _device
from ._wds import BytesField, InvalidError, _Loader, loader_option_help

# len, indexing, slices, iteration, `in`, ==: a read-only sequence.
collections.abc.Sequence.register(BytesField)

_OPTIONS_TITLE = "Options, from the library's option table"


def _option_doc(skip=()):
    """The option list of wds.Loader's and wds.Dataset's docstrings, made
    at import from the library's option table (loader/options.c: each
    row's keyword, CLI flag and help, as `wds batches --help` shows them),
    so a new option documents itself. skip: keywords the class does not
    take. A flag named in a help text is written as its keyword."""
    rows = loader_option_help()
    by_flag = {flag: name for name, flag, _, _ in rows}
    out = ["", f"    {_OPTIONS_TITLE} (keyword (--cli-flag): help):", ""]
    for name, flag, text, cli_value in rows:
        if name in skip:
            continue
        text = re.sub(r"--([a-z][a-z0-9-]*)",
                      lambda m: by_flag.get(m.group(1), m.group(0)),
                      " ".join(text.split()))
        key = name if cli_value is None else \
            f"{name}={cli_value == '1'}"  # a BOOL: what the flag sets
        out += textwrap.wrap(f"{key} (--{flag}): {text}", 76,
                             initial_indent="    ",
                             subsequent_indent="        ",
                             break_on_hyphens=False)
    return "\n".join(out) + "\n    "


def _torch_rank_world():
    """torch.distributed's rank and world size when it is initialised."""
    import sys

    torch = sys.modules.get("torch")  # never imported here for its own sake
    if torch is None:
        return None
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        return None
    return None


class Batch:
    """One batch of a wds.Loader, in the loader's slot memory.

    A read-only mapping of the fields: batch["jpg;png"] (or batch[0]) is a
    numpy array viewing the slot without a copy (a bytes field: a
    wds.BytesField, a read-only sequence of bytes whose items are made
    from the slot on first access); keys(), iteration and len() are over
    the field names, so dict(batch) is {name: array}. Beside them:
    batch.sample_keys and batch.urls (lists of str, one per row),
    batch.rows, batch.valid (numpy bool), batch.epoch, batch.index. The batch keeps its slot until release(), the end of a
    `with batch:` block, or garbage collection; arrays and BytesFields taken
    from it keep the memory alive after that (list(field) and array.copy()
    do not). Fields, keys and urls are read from the slot when first asked
    for, so ask before release().

    batch.to("cuda", non_blocking=True) gives a wds.DeviceBatch whose copies
    may still run: the slot stays out of the pool until they are over, even
    if this batch is released or dropped at once.
    """

    __slots__ = ("_b", "_names", "_arrays", "_keys", "_urls", "_sources",
                 "_rows", "epoch", "index", "_fences")

    def __init__(self, b, fences=None):
        self._b = b
        self._fences = fences if fences is not None else _device.Fences()
        self._names = b.names  # a tuple, shared by the loader's batches
        self._arrays = {}
        self._keys = None
        self._urls = None
        self._sources = None
        self._rows = b.rows
        self.epoch = b.epoch
        self.index = b.index

    @property
    def sample_keys(self):
        """The samples' keys, one per row (a fill row repeats one)."""
        k = self._keys
        if k is None:
            k = self._keys = self._b.keys
        return k

    @property
    def rows(self):
        """The number of rows (samples) of the batch."""
        return self._rows

    def keys(self):
        """The field names (a Mapping's keys: dict(batch) is
        {name: array})."""
        return list(self._names)

    def values(self):
        return [self._field(i) for i in range(len(self._names))]

    def get(self, name, default=None):
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name):
        return name in self._names

    @property
    def urls(self):
        """The shard each row came from."""
        u = self._urls
        if u is None:
            u = self._urls = self._b.urls
        return u

    @property
    def sources(self):
        """Each row's source: its index in the Loader's sources (numpy
        uint32, a copy; all 0 without sources)."""
        s = self._sources
        if s is None:
            import numpy as np

            s = self._sources = np.frombuffer(self._b.sources, dtype=np.uint32)
        return s

    def __len__(self):
        """The number of fields (a Mapping's length; batch.rows: rows)."""
        return len(self._names)

    @property
    def names(self):
        """The field names, as given in fields ("jpg;png", "cls")."""
        return list(self._names)

    def _field(self, i):
        a = self._arrays.get(i)
        if a is None:
            import numpy as np

            v = self._b.field(i)
            a = v if isinstance(v, BytesField) else np.asarray(v)
            self._arrays[i] = a
        return a

    @property
    def valid(self):
        return self._field(-1)

    def __getitem__(self, name):
        if isinstance(name, int):
            if not -len(self._names) <= name < len(self._names):
                raise IndexError(f"Batch: field {name} out of range")
            return self._field(name % len(self._names))
        try:
            i = self._names.index(name)
        except ValueError:
            raise KeyError(name) from None
        return self._field(i)

    def __iter__(self):
        return iter(self._names)

    def items(self):
        return [(n, self._field(i)) for i, n in enumerate(self._names)]

    def torch(self):
        """{name: torch tensor sharing the slot's memory} (bytes fields stay
        wds.BytesField sequences of bytes), plus "__valid__"."""
        import torch

        out = {}
        for i, n in enumerate(self._names):
            a = self._field(i)
            out[n] = a if isinstance(a, BytesField) else torch.from_numpy(a)
        out["__valid__"] = torch.from_numpy(self.valid)
        return out

    def to(self, device, non_blocking=False):
        """A wds.DeviceBatch: the fields as tensors on a CUDA device ("cuda",
        "cuda:N", a torch.device), __valid__ too; bytes fields, keys, urls
        and sources stay on the host. The copies run on the loader's own
        stream and the current stream waits for them. non_blocking=False
        also waits on the host until they are over; with True the slot is
        held until they are (see wds.DeviceBatch), whatever becomes of this
        batch."""
        eng = _device.engine(_device.resolve(device))
        f = self._fences
        db = _device.to_device(self, eng, f)
        if not non_blocking:
            f.drain()
        return db

    def release(self):
        """Gives the slot back (once no array taken from it is alive)."""
        self._arrays = {}
        self._b.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
        return False

    def __repr__(self):
        return (f"<wds.Batch epoch={self.epoch} index={self.index} "
                f"rows={self._rows} fields={list(self._names)}>")


collections.abc.Mapping.register(Batch)


class _EpochIterator:
    __slots__ = ("_loader", "_done")

    def __init__(self, loader):
        self._loader = loader
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        b = self._loader.next()
        if b is None:
            self._done = True
            raise StopIteration
        return b


class Source:
    """Source(spec, *, weight=None, proportion=None, repeat=None, index=None)

    One source of a mixed Loader (Loader(fields=, batch_size=,
    sources=[...])); at most one of weight, proportion and repeat:

    - resampled mode: each sample comes from source s with probability
      weight_s / sum of the weights (default 1; a proportion counts as a
      weight); repeat is refused.
    - exact mode: the source gives round(repeat x its samples) per epoch
      (default repeat 1; 2: each sample twice; 0.5: half of them, the next
      half in the next epoch), or round(proportion x E), E the sum of every
      source's samples; each of them once over all ranks. weight is refused.
      index: the source's `wds index` file (its counts).

    Batch.sources tells each row's source (its index in the list).
    """

    __slots__ = ("spec", "weight", "proportion", "repeat", "index")

    def __init__(self, spec, *, weight=None, proportion=None, repeat=None,
                 index=None):
        amounts = (("weight", weight), ("proportion", proportion),
                   ("repeat", repeat))
        given = [n for n, v in amounts if v is not None]
        if len(given) > 1:
            raise ValueError(f"Source: give one of weight, proportion and "
                             f"repeat, not {' and '.join(given)}")
        for n, v in amounts:
            if v is not None and not float(v) > 0:
                raise ValueError(f"Source: {n}={v!r} must be above 0")
        if not isinstance(spec, (str, bytes)) or not spec:
            raise ValueError(f"Source: spec must be a non-empty str, not "
                             f"{spec!r}")
        self.spec = spec
        self.weight = weight
        self.proportion = proportion
        self.repeat = repeat
        self.index = os.fspath(index) if index is not None else None

    def _tuple(self):
        return (self.spec, self.index, float(self.weight or 0),
                float(self.proportion or 0), float(self.repeat or 0))

    def __repr__(self):
        opts = "".join(f", {n}={getattr(self, n)!r}"
                       for n in ("weight", "proportion", "repeat", "index")
                       if getattr(self, n) is not None)
        return f"wds.Source({self.spec!r}{opts})"


def _floats(v):
    """A FLOATS option as state_dict can hold it: a list for a sequence
    (a tuple, a numpy array), else as given (a number, a str, None)."""
    if v is None or isinstance(v, (str, bytes, int, float)):
        return v
    try:
        return [float(x) for x in v]
    except TypeError:
        return v


def _sources_state(sources):
    """The sources as a state_dict holds them: lists (as JSON gives them
    back), or None."""
    return None if sources is None else [list(t) for t in sources]


def _saved(text):
    """(epoch, batches) of a C loader's saved state text."""
    kv = dict(line.split("=", 1) for line in text.split("\n") if "=" in line)
    return int(kv["epoch"]), int(kv["batches"])


def _give_up_oldest(fences):
    """Drops the oldest fence, whose done()/wait() raised: close() cannot
    wait for it, and keeping it would raise the same error at every later
    close (the Fences' own methods keep such an entry queued)."""
    with fences._lock:
        if fences._q:
            fences._free(fences._q.popleft())


class Loader:
    """Loader(spec=None, fields=None, batch_size=None, *, mode="exact", rank=None,
    world_size=None, workers=4, seed=0, epoch=0, shuffle_buffer=0,
    index=None, drop_last=False, last_batch=None, samples_per_epoch=None,
    image_size=224, crop="center", prefetch=4, on_error="stop",
    shard_shuffle=True, read_timeout_ms=None, retries=None,
    rank_batch_sizes=None, cache_dir=None, cache_size=0,
    allow_pipe_from_files=False,
    sources=None, eager_next_epoch=False, defer_reads="auto",
    image_memory_limit=None, device=None, jpeg_decode="cpu",
    shuffle_initial=None, shuffle_buffer_bytes=None, max_sample_bytes=None,
    max_window_bytes=None, max_unverified_bytes=None, crop_scale=None,
    crop_ratio=None, flip_prob=None, brightness=None, contrast=None,
    saturation=None, hue=None, image_dtype="uint8", normalize_mean=None,
    normalize_std=None, transform=None, transform_workers=2,
    transform_fields=None, transform_start_method=None,
    transform_timeout=None, image="numpy")

    The wds loader (wds/loader.h): the batches one data-parallel rank trains
    on, decoded by worker threads into a pool of prefetch slots. fields is
    the CLI's --decode string ("jpg;png:rgb:224,cls") or a list of such
    items. rank and world_size default to torch.distributed's when it is
    initialised, else to the environment as the C loader reads it (RANK and
    WORLD_SIZE, SLURM_*, OMPI_*, PMI_*). Iterating yields the wds.Batch objects of
    one epoch; the next iteration is the next epoch. mode is "exact" by
    default, as wds-train's (`wds batches` and `wds bench` default to
    "plain"); workers is 1 .. 256, as the CLI's --workers. len() is the number of
    batches per epoch on this rank (exact and resampled modes). Failures
    raise wds.Error subclasses; holding every slot raises wds.InvalidError.

    rank_batch_sizes=[24, 8, 8] gives each rank its own batch size (one
    entry per rank; batch_size may then be None): in exact and resampled
    modes every rank takes the same number of steps S and rank r S * B_r
    samples of the epoch, split in proportion (S = ceil(samples / sum),
    floor with drop_last; resampled: samples = samples_per_epoch *
    world_size). Plain mode refuses it. state_dict() records the sizes and
    load_state_dict() refuses other ones.

    The keywords but spec, fields, sources, rank_batch_sizes and device
    are the rows of the library's option table (wds_loader_option,
    wds/loader.h), as the CLI's loader flags are: the same meanings,
    bounds and messages (`wds batches --help` describes each). None keeps
    an option's default; a value out of range is a ValueError
    (wds.InvalidError) naming the keyword. shuffle_initial (samples
    buffered before the first output), shuffle_buffer_bytes (the shuffle
    buffer's bytes per worker; None: 1 GiB), max_sample_bytes (the largest
    sample) and max_window_bytes (the largest zstd window; None: 128 MiB)
    are the CLI's --shuffle-initial, --shuffle-bytes, --max-sample-bytes
    and --max-window. max_unverified_bytes (--max-unverified; None: 64
    MiB) is how much of one zstd frame or gzip member is held until its
    checksum passes: a sample is delivered only after that, and a larger
    frame's samples unchecked, counted in stats()["unverified_samples"].

    read_timeout_ms: a shard that delivers no byte for this long fails
    (None: 5 minutes; 0: wait forever); retries: how many times a failed
    http(s):// transfer is tried again (None: 5; 0: none), as the
    commands' --read-timeout and --retries. A negative value, rank or
    world_size is a ValueError.

    cache_dir keeps remote shards (http(s)://, s3://) read whole on local
    disk for later epochs and processes; cache_size (bytes, 0: no limit)
    bounds it, least recently used shards deleted first.
    pipe: commands read from an @FILE of spec or named by index are refused
    unless allow_pipe_from_files (such files may come from anywhere).

    A mix of several shard sets: no spec and sources a list of wds.Source
    (see there): wds.Loader(fields="npy,cls", batch_size=32,
    sources=[...]); each batch's .sources says which one each row came from.
    state_dict() records the sources and load_state_dict() refuses other
    ones.

    eager_next_epoch=True starts reading the next epoch as soon as this one
    has handed out its last batch, so its first batches are ready when
    iteration starts again (set_epoch to that next epoch keeps the reading;
    another epoch, or close(), abandons it). The batches are the same.

    defer_reads ("auto", "on", "off"): large fields (16 KiB and more) of
    local uncompressed shards stay in the file while their sample waits in
    the shuffle buffer and are read (pread) as it leaves it: "auto" (the
    default) only fields that were in the page cache when the shard was
    opened. The batches are the same; stats() counts deferred_fields.

    image_memory_limit (bytes; None: 256 MiB) is the memory one image's
    decode may take, per worker: the decoded pixels (a JPEG at the DCT
    scale its output needs, a PNG whole) and a progressive JPEG's buffered
    coefficients, counted from the headers before anything is allocated.
    An image over it is an error (under on_error) naming its shard, sample,
    field, size and the limit.

    device ("cuda", "cuda:N", a torch.device; needs PyTorch) yields
    wds.DeviceBatch objects instead: each batch's fields and __valid__ as
    tensors on that GPU (bytes fields as lists of bytes, keys, urls and
    sources stay on the host). The copies run on a CUDA stream the loader
    owns, the current stream waits for them (no host synchronisation), and
    the slot goes back to the pool only once they are over: the loader
    waits for the oldest copy only when the pool has no slot to spare.

    jpeg_decode ("cpu", "gpu"): where JPEG image fields are decoded. "gpu"
    needs device=: the workers plan each JPEG's crop (the same samples and
    crops as "cpu") and nvJPEG decodes, resizes and crops on that GPU into
    the DeviceBatch's image tensor (NHWC uint8, as "cpu" gives); PNGs and
    images nvJPEG refuses are decoded on the CPU. Without a GPU torch sees
    it raises RuntimeError; without a CUDA build of wds or libnvjpeg
    wds.OpenError saying what is missing (never a silent CPU decode).
    stats()["gpu_jpeg"] counts GPU images, CPU fallbacks and failures and
    names the libnvjpeg loaded.

    Image augmentation in the workers, torchvision v2's definitions, each
    image's draws from its own key (reproducible from the seed):
    crop="random" is RandomResizedCrop(scale=crop_scale (None: (0.08, 1)),
    ratio=crop_ratio (None: (3/4, 4/3))) then a horizontal flip with
    probability flip_prob (None: 0.5); brightness, contrast, saturation and
    hue (None: off) are ColorJitter's on the resized uint8 pixels, in a
    random order per image, each a number v (factors uniform in
    [max(0, 1 - v), 1 + v], the hue shift in [-v, v]) or a (min, max)
    pair, as torchvision's; image_dtype "float32" or "float16" makes image fields
    channels-first (N, C, H, W) arrays of (x / 255 - normalize_mean) /
    normalize_std (a number or one per channel; None: 0 and 1), ready for
    a model, where "uint8" (the default) gives (N, H, W, C) bytes.

    transform=fn runs fn on each decoded sample, the dict wds.Dataset
    yields ({"__key__", "__url__", "__valid__", field: value}, fields read
    as wds.Dataset reads them: "jpg" without a size decoded at its own size,
    txt as str, ...), in transform_workers processes (0: in this thread) fed
    through shared memory; fn returns a dict of arrays, tensors or numbers
    of fixed shapes (or a tuple: fields "0", "1", ...), written into one
    shared block per batch that the wds.Batch views (pinned for device=).
    transform_fields={name: (shape, dtype)} declares them, else the first
    sample fixes them; a row that differs is an error naming the field, the
    key and both shapes. The batches hold the same samples in the same order
    as without it; invalid rows are not given to fn. Python's random,
    numpy's and torch's global generators are seeded per sample from (seed,
    epoch, key), so the results do not depend on the workers or a resume.
    fn raising is a wds.TransformError with the key, the shard and the
    worker's traceback (on_error="skip": the row invalid, counted in
    stats()["transform_skipped"]); a worker that dies is one too, and
    transform_timeout (seconds) bounds the wait for a batch (TimeoutError);
    after either the loader must be closed. transform_start_method:
    "forkserver" (the default), "spawn" (fn must pickle) or "fork" (only
    while the process has no other thread). state_dict() gives the position
    of the batches yielded, not of those being transformed.
    """

    def __init__(self, spec=None, fields=None, batch_size=None, *,
                 mode="exact", rank=None,
                 world_size=None, workers=4, seed=0, epoch=0, shuffle_buffer=0,
                 index=None, drop_last=False, last_batch=None,
                 samples_per_epoch=None, image_size=224, crop="center",
                 prefetch=4, on_error="stop", shard_shuffle=True,
                 read_timeout_ms=None, retries=None, rank_batch_sizes=None,
                 cache_dir=None, cache_size=0, allow_pipe_from_files=False,
                 sources=None, eager_next_epoch=False, defer_reads="auto",
                 image_memory_limit=None, device=None, jpeg_decode="cpu",
                 shuffle_initial=None, shuffle_buffer_bytes=None,
                 max_sample_bytes=None, max_window_bytes=None,
                 max_unverified_bytes=None,
                 crop_scale=None, crop_ratio=None, flip_prob=None,
                 brightness=None, contrast=None, saturation=None, hue=None,
                 image_dtype="uint8", normalize_mean=None,
                 normalize_std=None, transform=None, transform_workers=2,
                 transform_fields=None, transform_start_method=None,
                 transform_timeout=None, image="numpy"):
        self._fences = _device.Fences()
        self._engine = None
        self._tx = None
        self._tx_end = False
        if jpeg_decode == "gpu" and device is None:
            raise ValueError("Loader: jpeg_decode='gpu' needs device= (the "
                             "GPU that decodes the JPEGs)")
        if device is not None:
            self._engine = _device.engine(_device.resolve(device))
        if jpeg_decode == "gpu":
            self._engine.gpu_jpeg()
        if fields is None:
            raise TypeError("Loader: fields is required (the --decode "
                            "string: \"jpg:rgb:224,cls\")")
        if not isinstance(fields, (str, bytes)):
            fields = ",".join(fields)
        if transform is not None:
            fields = self._transform_pool(
                fields, transform, transform_workers, transform_fields,
                transform_start_method, transform_timeout, image, on_error,
                seed, device)
        elif image not in (None, "numpy") or transform_fields is not None:
            raise ValueError("Loader: image= and transform_fields= go with "
                             "transform=")
        # None: not given (torch.distributed's, else the environment's);
        # the C loader's "not given" is -1, which is no rank.
        for name, v, lo in (("rank", rank, 0), ("world_size", world_size, 1)):
            if v is None:
                continue
            try:
                ok = operator.index(v) >= lo
            except TypeError:
                ok = False
            if not ok:
                raise ValueError(f"Loader: {name} {v!r}: expected an "
                                 f"integer >= {lo}, or None (from "
                                 f"torch.distributed or the environment)")
        if rank is None or world_size is None:
            tw = _torch_rank_world()
            if tw is not None:
                rank = tw[0] if rank is None else rank
                world_size = tw[1] if world_size is None else world_size
        if sources is not None:
            if spec is not None:
                raise ValueError("Loader: give spec or sources, not both")
            sources = list(sources)
            for s in sources:
                if not isinstance(s, Source):
                    raise TypeError(f"Loader: sources must be wds.Source "
                                    f"objects, not {type(s).__name__}")
            sources = [s._tuple() for s in sources]
        elif spec is None:
            raise ValueError("Loader: give a spec or sources")
        # The options as given: _Loader converts each by its row of the
        # library's option table (wds_loader_option; python/wds/_options.c),
        # which names the keyword when it refuses a value.
        self._args = dict(
            spec=(spec if spec is None or isinstance(spec, (str, bytes))
                  else list(spec)),
            sources=sources,
            fields=fields, batch_size=batch_size, mode=mode,
            rank=-1 if rank is None else int(rank),
            world_size=-1 if world_size is None else int(world_size),
            workers=workers,
            seed=seed, shuffle_buffer=shuffle_buffer,
            shuffle_initial=shuffle_initial,
            shuffle_buffer_bytes=shuffle_buffer_bytes,
            index=index, drop_last=drop_last, last_batch=last_batch,
            samples_per_epoch=samples_per_epoch, image_size=image_size,
            crop=crop, prefetch=prefetch, on_error=on_error,
            shard_shuffle=shard_shuffle,
            max_sample_bytes=max_sample_bytes,
            read_timeout_ms=read_timeout_ms, retries=retries,
            max_window_bytes=max_window_bytes,
            max_unverified_bytes=max_unverified_bytes,
            rank_batch_sizes=None if rank_batch_sizes is None
            else list(rank_batch_sizes),
            cache_dir=cache_dir, cache_size=cache_size,
            allow_pipe_from_files=allow_pipe_from_files,
            eager_next_epoch=eager_next_epoch, defer_reads=defer_reads,
            image_memory_limit=image_memory_limit, jpeg_decode=jpeg_decode,
            crop_scale=_floats(crop_scale), crop_ratio=_floats(crop_ratio),
            flip_prob=flip_prob, brightness=_floats(brightness),
            contrast=_floats(contrast), saturation=_floats(saturation),
            hue=_floats(hue), image_dtype=image_dtype,
            normalize_mean=_floats(normalize_mean),
            normalize_std=_floats(normalize_std))
        # _start_batches: wds.Dataset's workers open at a position at once.
        try:
            self._open(0 if epoch is None else int(epoch),
                       getattr(self, "_start_batches", 0))
        except BaseException:
            if self._tx is not None:
                self._tx.close()
            raise

    def _transform_pool(self, fields, fn, workers, decl, start, timeout,
                        image, on_error, seed, device):
        """Starts transform='s pool (before the C loader's threads exist)
        and returns the C loader's fields for wds.Dataset's field items."""
        from . import _transform
        from ._dataset import _fields

        if not callable(fn):
            raise TypeError(f"Loader: transform must be callable, not "
                            f"{type(fn).__name__}")
        image = "numpy" if image is None else image
        workers = 2 if workers is None else workers  # None: the default
        if image not in ("numpy", "torch", "pil"):
            raise ValueError(f"Loader: image {image!r}: expected 'numpy', "
                             f"'torch' or 'pil'")
        try:
            workers = operator.index(workers)
        except TypeError:
            workers = -1
        if not 0 <= workers <= 256:
            raise ValueError(f"Loader: transform_workers {workers!r}: "
                             f"expected an integer 0 .. 256")
        if timeout is not None and not float(timeout) > 0:
            raise ValueError(f"Loader: transform_timeout {timeout!r}: "
                             f"expected seconds above 0, or None")
        if decl is not None:
            import numpy as np

            try:
                decl = {str(k): (tuple(int(x) for x in s), np.dtype(d))
                        for k, (s, d) in dict(decl).items()}
            except (TypeError, ValueError) as e:
                raise ValueError(f"Loader: transform_fields: expected "
                                 f"{{name: (shape, dtype)}}: {e}") from None
        fs = _fields(fields.decode() if isinstance(fields, bytes)
                     else fields)
        fspecs = [(f.key, f.post, f.name) for f in fs]
        self._tx = _transform.Pipeline(
            fn, fspecs, image, workers, start, timeout, on_error == "skip",
            int(seed or 0), decl, 2, None if device is None else device)
        return ",".join(f.spec for f in fs)

    def _open(self, epoch, batches, state=None):
        a = self._args
        # rank and world_size -1 (as state_dict records them): not given
        self._l = _Loader(a["spec"], a["fields"], a["batch_size"],
                          **{k: None if k in ("rank", "world_size") and v < 0
                             else v for k, v in a.items()
                             if k not in ("spec", "fields", "batch_size")},
                          epoch=epoch, resume_batches=batches,
                          resume_state=state)

    def __iter__(self):
        """The batches of one epoch. An error raised by next() leaves the
        iterator usable (holding every slot is an error to recover from)."""
        return _EpochIterator(self)

    def next(self):
        """The next batch (a wds.DeviceBatch with device=), or None at the
        end of the epoch."""
        f = self._fences
        if self._tx is not None:
            return self._next_transformed(f)
        if self._engine is not None:
            # Slots behind copies: keep one for the workers to fill.
            f.reserve((int(self._args["prefetch"] or 0) or 4) - 1)
        else:
            f.poll()
        while True:
            try:
                b = self._l.next()
                break
            except InvalidError:
                # Every slot out: some may only wait for their copies.
                if not f.wait_oldest():
                    raise
        if b is None:
            return None
        batch = Batch(b, f)
        if self._engine is None:
            return batch
        return _device.to_device(batch, self._engine, f, handle=batch)

    def _next_transformed(self, f):
        """transform=: keeps the pool's batches in flight, then the oldest
        one transformed."""
        tx = self._tx
        f.poll()
        while not self._tx_end and not tx.full():
            state = self._l.state()  # the position before this batch
            b = self._l.next()
            if b is None:
                self._tx_end = True
                break
            tx.submit(Batch(b), state)
        if not tx.in_flight():
            self._tx_end = False  # the next call starts the next epoch
            return None
        batch = Batch(tx.next(), f)
        if self._engine is None:
            return batch
        return _device.to_device(batch, self._engine, f, handle=batch)

    def _state_text(self):
        """The C loader's saved state at the position of the batches given
        out (transform=: before the oldest one still in flight)."""
        if self._tx is not None:
            head = self._tx.head_state()
            if head is not None:
                return head
        return self._l.state()

    def _position(self):
        """(epoch, batches given out): transform=: before the oldest batch
        still in flight."""
        head = None if self._tx is None else self._tx.head_state()
        return self._l.position() if head is None else _saved(head)

    def __len__(self):
        n = self._l.epoch_batches()
        if n == 0:
            raise TypeError("len(Loader): not known in plain mode")
        return n

    def set_epoch(self, epoch):
        """Abandons the current epoch; the next batch is from epoch."""
        if self._tx is not None:
            self._tx.drop()
            self._tx_end = False
        self._l.set_epoch(int(epoch))

    @property
    def epoch(self):
        return self._position()[0]

    def state_dict(self):
        """The position (epoch, batches delivered in it) and the options,
        as torchdata's StatefulDataLoader carries them. "state" is the C
        loader's saved state (wds_loader_state): the position with
        everything that gives it meaning (world size, batch or per-rank
        sizes, workers, shuffle buffer, mode, seed, the data), which
        load_state_dict checks; "world_size" is the world the loader ran
        on (from torch.distributed or the environment when not given)."""
        text = self._state_text()
        e, n = self._position()
        world = int(text.split("\nworld_size=", 1)[1].split("\n", 1)[0])
        return {"epoch": e, "batches": n,
                "seed": self._args["seed"], "batch_size": self._args["batch_size"],
                "world_size": world, "rank": self._args["rank"],
                "rank_batch_sizes": self._args["rank_batch_sizes"],
                "sources": _sources_state(self._args["sources"]),
                "state": text}

    def load_state_dict(self, state):
        """Resumes at state's position: the batches that follow are those
        an uninterrupted loader would have yielded. A state saved under a
        configuration in which its position means other samples (another
        world size, batch or per-rank sizes, workers, shuffle buffer, mode,
        seed or data) raises ValueError naming both values, and the loader
        goes on where it was; any rank's state resumes any rank. In exact
        mode, one source or several (and a saved shuffle buffer whose byte
        bound the replay can follow: an index with per-sample detail for
        every source, or shuffle_buffer * max_sample_bytes <
        shuffle_buffer_bytes), another world, batch or per-rank sizes,
        workers or shuffle buffer is an elastic resume: the ranks deliver
        the samples of the epoch the saving job had not (each source's,
        with sources=), each once as a valid row (the padding is marked
        invalid), in equal steps (len() gives them), and later epochs are
        a fresh run's (elastic says so)."""
        mine = dict(self._args, sources=_sources_state(self._args["sources"]))
        text = state.get("state")
        if text is None and state.get("world_size", -1) not in (-1, None):
            # A state_dict of an older wds: no saved state, but its world
            # (-1: not given, which is not known here) is checked.
            world = int(self._l.state().split("\nworld_size=", 1)[1]
                        .split("\n", 1)[0]) if not self._l.closed else \
                self._args["world_size"]
            if world >= 0 and int(state["world_size"]) != world:
                raise ValueError(
                    f"Loader.load_state_dict: saved with world_size "
                    f"{state['world_size']}; this loader has world_size "
                    f"{world}: its position means other samples here")
        # With the C loader's saved state, the sizes are its to check: in
        # exact mode another world, batch or per-rank sizes, workers or
        # shuffle buffer is an elastic resume.
        for k in (("seed", "sources") if text is not None else
                  ("seed", "batch_size", "rank_batch_sizes", "sources")):
            # A state without rank_batch_sizes or sources had none.
            theirs = state.get(k)
            if k == "sources":
                theirs = _sources_state(theirs)
            if (k in state or k in ("rank_batch_sizes", "sources")) and \
                    theirs != mine[k]:
                raise ValueError(f"Loader.load_state_dict: {k} {theirs!r} "
                                 f"is not this loader's {mine[k]!r}")
        epoch, batches = int(state["epoch"]), int(state["batches"])
        if text is not None:
            saved = dict(line.split("=", 1) for line in str(text).split("\n")
                         if "=" in line)
            if (saved.get("epoch"), saved.get("batches")) != \
                    (str(epoch), str(batches)):
                raise InvalidError(
                    f"Loader.load_state_dict: epoch {epoch}, batches "
                    f"{batches}, but its saved state (\"state\") is at "
                    f"epoch {saved.get('epoch')}, batches "
                    f"{saved.get('batches')}: the state was edited")
        self._fences.drain()
        # Where it was, as its saved state: in the rest of an elastic
        # resume's epoch a bare position would mean other samples.
        old = None if self._l.closed else self._state_text()
        if self._tx is not None:
            self._tx.drop()
            self._tx_end = False
        self._l.close()
        try:
            self._open(epoch, batches, text)
        except Exception:
            # A position this loader cannot take (past the epoch's end):
            # the error is raised, and the loader goes on where it was.
            if old is not None:
                self._open(0, 0, old)
            raise

    @property
    def elastic(self):
        """(old world size, samples left) while the epoch being read is the
        rest of an elastic resume's (load_state_dict of a state saved on
        another world, with other sizes, workers or shuffle buffer: in exact
        mode the new ranks deliver those samples between them, each once,
        in equal steps; in resampled mode, that many draws); None
        otherwise."""
        return self._l.elastic()

    def stats(self):
        """The loader's counters (wds_loader_stats); with jpeg_decode="gpu"
        also "gpu_jpeg": the GPU decoder's (gpu_images, cpu_fallback,
        cpu_rows, failed, device_bytes, hardware, library)."""
        st = self._l.stats()
        if self._tx is not None:
            st["transform_skipped"] = self._tx.skipped
        jpeg = getattr(self._engine, "jpeg", None)
        if jpeg is not None:
            st["gpu_jpeg"] = jpeg.stats()
        return st

    def close(self):
        """Waits for copies still reading slots (device=, Batch.to), then
        stops the loader. A copy whose done() or wait() raises an engine
        error is given up (its slot goes with it); one interrupted
        (KeyboardInterrupt) is synchronised first; the others are still
        waited for, the
        loader is closed all the same and the first error is raised, once:
        a later close() does nothing."""
        if self._l.closed:
            return
        first = None
        f = self._fences
        while True:
            try:
                if not f.wait_oldest():
                    break
            except Exception as e:  # the engine's: a CUDA error
                if first is None:
                    first = e
                _give_up_oldest(f)
            except BaseException as e:  # KeyboardInterrupt, SystemExit
                # Not the copy's failure: it may still be reading the slot.
                # The engine's stream is synchronised before the slot goes
                # (an engine error there gives the copy up; a second
                # interrupt leaves the loader open for a later close()).
                if first is None:
                    first = e
                with f._lock:
                    eng = f._q[0][0] if f._q else None
                if eng is not None:
                    try:
                        eng.synchronize()
                    except Exception:
                        _give_up_oldest(f)
        if self._tx is not None:
            self._tx.close()
        self._l.close()
        if first is not None:
            raise first

    @property
    def closed(self):
        return self._l.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        a = self._args
        what = (f"{len(a['sources'])} sources" if a["sources"] is not None
                else repr(a["spec"]))
        if self._l.closed:
            return f"<wds.Loader {what} closed>"
        e, n = self._position()
        rank = "" if a["rank"] < 0 else f" rank={a['rank']}/{a['world_size']}"
        return (f"<wds.Loader {what} fields={a['fields']!r} "
                f"batch_size={a['batch_size']} mode={a['mode']!r}{rank} "
                f"epoch={e} batches={n}>")


# The option list, from the library's table (resume_batches is
# load_state_dict's, not a keyword).
_LOADER_SKIP = ("resume_batches",)
Loader.__doc__ += _option_doc(skip=_LOADER_SKIP)
