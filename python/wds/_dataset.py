"""wds.Dataset: a torch IterableDataset over the C loader.

The split is node -> rank -> DataLoader worker -> the C loader's threads:
each DataLoader worker opens its own wds.Loader (lazily, in the worker: no
C thread exists before a fork) as one *virtual rank* of world_size x
num_workers, so exactness and equal steps are the C loader's own:

- exact mode: the epoch's samples are cut into world x num_workers equal
  ranges (padded by repeating the first samples, as DistributedSampler,
  or cut short with drop_last), so every worker of every rank yields the
  same number of samples, and a DataLoader(batch_size=B) the same number
  of batches on every rank; the padding repeats carry their sample's data
  with "__valid__" False, so the valid samples of all ranks and workers
  are every sample of the epoch once;
- resampled mode: samples_per_epoch per rank, dealt to the workers
  (the first samples_per_epoch mod num_workers workers take one more);
- plain mode: every shard once, ranks may differ (not for DDP).

The C loader carries fixed-size arrays (images decoded and resized by its
decoders, integers) in batch slots of `chunk` rows; everything whose size
varies (images at their own size, .npy of any shape, text, JSON, other
bytes) travels as bytes and is decoded here, in the worker, after the slot
is given back. Samples are dicts {"__key__", "__url__", "__valid__",
field: value}; the user's transforms run in the worker processes.

Position: each worker counts the samples it has yielded; state_dict() (called
by torchdata's StatefulDataLoader in each worker) records it, and a worker
given a state resumes its virtual rank's stream there (the C loader's resume,
plus the few samples inside a chunk skipped here). A state taken with another
num_workers (Dataset.load_state_dict in the main process, before the
DataLoader is made) finishes the interrupted epoch with the old split: its
streams are dealt to the new workers, each read to its end; the epochs after
it use the new split. A state records what its positions depend on (world
size, drop_last, shuffle_buffer, samples_per_epoch, chunk, a fingerprint of
spec and index); load_state_dict refuses other values, naming both.
"""

import collections.abc
import hashlib
import operator

import numpy as np

from ._decode import decode_field
from ._loader import Loader, _option_doc, _torch_rank_world
from ._wds import _topology
from ._wds import check_loader_options as _check_loader_options
from ._wds import loader_options as _loader_options

_IMAGE_EXTS = ("jpg", "jpeg", "png")
_INT_EXTS = ("cls", "cls2", "index", "inx", "id")
_TEXT_EXTS = ("txt", "text", "transcript")
_JSON_EXTS = ("json", "jsn")
_DECODERS = ("image", "npy", "int", "bytes")
_STATE_VERSION = 2
# What a state's positions depend on besides seed and mode: a state taken
# under other values would resume another split or order (silently wrong
# samples), so load_state_dict refuses it naming both values.
_STATE_KEYS = ("world_size", "drop_last", "shuffle_buffer",
               "samples_per_epoch", "chunk", "data")

try:  # a torch IterableDataset when torch is there; plain otherwise
    from torch.utils.data import IterableDataset as _Base
except ImportError:  # pragma: no cover - torch is wds[torch]
    _Base = object


def _kind(name):
    """What the first extension of NAME ("jpg;png") is."""
    ext = name.split(";")[0].strip().lower()
    if ext in _IMAGE_EXTS:
        return "image"
    if ext in _INT_EXTS:
        return "int"
    if ext == "npy":
        return "npy"
    if ext in _TEXT_EXTS:
        return "text"
    if ext in _JSON_EXTS:
        return "json"
    return "bytes"


class _Field:
    """One item of fields: the C loader's spec for it, and what the worker
    does with the row it gives."""

    __slots__ = ("name", "key", "spec", "post")

    def __init__(self, item):
        parts = [p.strip() for p in item.split(":")]
        name, opts = parts[0], [p.lower() for p in parts[1:]]
        if not name:
            raise ValueError(f"Dataset: field {item!r} has no name")
        kind = _kind(name)
        decoder = next((o for o in opts if o in _DECODERS), None)
        sized = any(o.replace("x", "").isdigit() for o in opts)
        self.name = name
        # The sample's key for it: the first extension ("jpg;png" -> "jpg").
        self.key = name.split(";")[0].strip().lower()
        if decoder == "bytes":
            kind = "bytes"
        elif decoder == "npy":
            kind = "npy-c"  # stacked by the C decoder: one shape for all
        elif decoder == "image":
            kind = "image"
        elif decoder == "int":
            kind = "int"
        if kind == "image" and sized:
            self.spec, self.post = item, "array"
        elif kind == "image":
            # At its own size: the bytes, decoded here.
            self.spec, self.post = f"{name}:bytes", "image"
        elif kind == "int":
            self.spec, self.post = f"{name}:int", "int"
        elif kind == "npy-c":
            self.spec, self.post = item, "array"
        elif kind == "npy":
            self.spec, self.post = f"{name}:bytes", "npy"
        elif kind in ("text", "json"):
            self.spec, self.post = f"{name}:bytes", kind
        else:
            self.spec, self.post = f"{name}:bytes", "bytes"


def _fields(fields):
    if isinstance(fields, (str, bytes)):
        fields = fields.decode() if isinstance(fields, bytes) else fields
        fields = [f for f in fields.split(",") if f.strip()]
    out = [_Field(f) for f in fields]
    if not out:
        raise ValueError("Dataset: fields is empty")
    keys = [f.key for f in out]
    if len(set(keys)) != len(keys):
        raise ValueError(f"Dataset: two fields share a name: {keys}")
    return out


_ROWS = frozenset(name for name, _ in _loader_options())


def _worker():
    """(worker id, worker count) of the DataLoader worker this runs in."""
    try:
        from torch.utils.data import get_worker_info
    except ImportError:  # pragma: no cover
        return 0, 1
    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


class Dataset(_Base):
    """Dataset(spec, fields, *, mode="exact", rank=None, world_size=None,
    seed=0, epoch=0, shuffle_buffer=0, samples_per_epoch=None, index=None,
    drop_last=False, image="numpy", threads=1, chunk=32, transform=None,
    **loader_options)

    A torch IterableDataset of decoded samples for DataLoader(num_workers=N)
    and torchdata's StatefulDataLoader. fields is the loader's --decode
    string or a list of its items: "jpg;png:rgb:224" images decoded and
    resized by the C decoder (uint8 HWC arrays), "jpg" without a size at
    their own size (decoded in the worker: numpy HWC uint8, or PIL images
    with image="pil", HWC uint8 tensors with image="torch"), "cls" (and the
    other integer extensions) int, "npy" any shape (":npy" to have the C
    decoder stack one fixed shape), "txt" str, "json" the parsed object,
    anything else bytes. Each sample is a dict of the fields' first
    extensions plus "__key__", "__url__" and "__valid__" (False on a row
    the C loader marks invalid: exact mode's padding, which repeats a
    sample with its data, or a failed sample under on_error="skip", whose
    fields are None, "" or zeros).

    rank and world_size default to torch.distributed's, else the
    environment's by the C loader's rule, as wds.Loader's. In exact mode
    every sample of the epoch comes once over all ranks and DataLoader
    workers, and every worker of every rank yields the same count (so
    every rank the same number of batches); resampled mode gives
    samples_per_epoch per rank.
    set_epoch(e) before iterating, as DistributedSampler's. threads is
    the C loader's worker threads per DataLoader worker; chunk the rows of
    its internal batches. Other keywords (image_size, crop, on_error,
    read_timeout_ms, cache_dir, ...) are wds.Loader's.

    .map(fn) adds a transform (run in the DataLoader's workers, in order;
    .map_dict, .map_tuple, .to_tuple, .rename and .unbatched are
    webdataset's, all keeping every sample, so exactness and resume);
    .batched(n, collation_fn=None, partial=True) batches inside the
    dataset (use DataLoader(batch_size=None) then): the default collation
    stacks same-shape arrays and tensors, makes numbers tensors (with
    torch) or arrays, keeps strings and ragged fields as lists
    (ragged="pad" pads ragged arrays with zeros to the largest shape).
    """

    def __init__(self, spec, fields, *, mode="exact", rank=None,
                 world_size=None, seed=0, epoch=0, shuffle_buffer=0,
                 samples_per_epoch=None, index=None, drop_last=False,
                 image="numpy", threads=1, chunk=32, transform=None,
                 **loader_options):
        if image not in ("numpy", "pil", "torch"):
            raise ValueError(f"Dataset: image={image!r}: 'numpy', 'pil' or "
                             f"'torch'")
        for bad in ("batch_size", "workers", "last_batch", "epoch",
                    "rank_batch_sizes", "device", "jpeg_decode",
                    "eager_next_epoch"):
            if bad in loader_options:
                raise TypeError(f"Dataset: {bad}= is not a Dataset keyword "
                                f"(batch with the DataLoader or .batched; "
                                f"threads= is the C loader's workers)")
        # The options' values and the rules between them are the
        # library's (wds_loader_config_check, naming keywords), checked
        # here: the loaders open later, in the DataLoader's workers.
        _check_loader_options(
            mode=mode, rank=rank, world_size=world_size,
            samples_per_epoch=samples_per_epoch, index=index,
            drop_last=drop_last, shuffle_buffer=shuffle_buffer,
            **{k: v for k, v in loader_options.items() if k in _ROWS})
        self._fields = _fields(fields)
        self._spec = spec if isinstance(spec, (str, bytes)) or spec is None \
            else list(spec)
        for name, v, lo in (("rank", rank, 0), ("world_size", world_size, 1)):
            if v is not None and operator.index(v) < lo:
                raise ValueError(f"Dataset: {name} {v!r}: expected an "
                                 f"integer >= {lo}, or None")
        self._rank = rank
        self._world = world_size
        self._mode = mode
        self._seed = int(seed)
        self.epoch = int(epoch)
        self._shuffle_buffer = shuffle_buffer
        self._spe = samples_per_epoch
        self._index = index
        self._drop_last = bool(drop_last)
        self._image = image
        self._threads = int(threads)
        self._chunk = int(chunk)
        if self._chunk < 1:
            raise ValueError(f"Dataset: chunk={chunk!r}: at least 1")
        self._options = dict(loader_options)
        self._stages = [] if transform is None else [_MapAll(transform)]
        # Set in a worker: where it is; set by load_state_dict.
        self._state = None
        self._resume = None  # (nw_old, {stream: (epoch, done)})
        self._pos = None

    # -- the pipeline --------------------------------------------------
    def _copy(self):
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        c._stages = list(self._stages)
        return c

    def map(self, fn):
        """A copy with fn applied to each sample (or batch, after
        .batched), in the DataLoader's worker processes. Every sample goes
        through: fn may not drop one (exactness and equal steps)."""
        return self._then(_MapAll(fn))

    def map_dict(self, **kw):
        """webdataset's map_dict: kw[field](sample[field]) per field."""
        from ._webdataset import map_dict

        return self._then(map_dict(**kw))

    def map_tuple(self, *fns):
        """webdataset's map_tuple, after .to_tuple."""
        from ._webdataset import map_tuple

        return self._then(map_tuple(*fns))

    def to_tuple(self, *fields, missing_is_error=True):
        """webdataset's to_tuple: ("png;jpg", "cls") or "png;jpg cls"."""
        from ._webdataset import to_tuple

        return self._then(to_tuple(*fields, missing_is_error=missing_is_error))

    def rename(self, keep=True, **kw):
        """webdataset's rename: new="old;other"."""
        from ._webdataset import rename

        return self._then(rename(keep=keep, **kw))

    def batched(self, n, collation_fn=None, partial=True, ragged="list"):
        """A copy yielding batches of n samples made by collation_fn
        (default: wds's default collation, see the class)."""
        if int(n) < 1:
            raise ValueError(f"batched: n={n!r}: at least 1")
        if ragged not in ("list", "pad"):
            raise ValueError(f"batched: ragged={ragged!r}: 'list' or 'pad'")
        return self._then(_Batched(int(n), collation_fn, bool(partial),
                                   ragged))

    def unbatched(self):
        """webdataset's unbatched: batches back into samples."""
        from ._webdataset import unbatched

        return self._then(unbatched())

    def _then(self, stage):
        c = self._copy()
        c._stages.append(stage)
        return c

    def set_epoch(self, epoch):
        """The epoch the next iteration reads (DistributedSampler's)."""
        self.epoch = int(epoch)

    # -- the split -----------------------------------------------------
    def _rank_world(self):
        rank, world = self._rank, self._world
        if rank is None or world is None:
            tw = _torch_rank_world()
            if tw is not None:
                rank = tw[0] if rank is None else rank
                world = tw[1] if world is None else world
        if rank is None or world is None:
            # The environment, read by the C loader's own rule
            # (base/topology.c): a partial or bad set is its wds.Error.
            env_r, env_w = _topology()
            rank = env_r if rank is None else rank
            world = env_w if world is None else world
        if not 0 <= rank < world:
            raise ValueError(f"Dataset: rank {rank} is not in a world of "
                             f"{world}")
        return int(rank), int(world)

    def _loader(self, vrank, vworld, epoch, skip_chunks, spe):
        opts = dict(self._options)
        if self._shuffle_buffer:
            opts["shuffle_buffer"] = self._shuffle_buffer
        if spe is not None:
            opts["samples_per_epoch"] = spe
        cls = _ResumingLoader
        return cls(skip_chunks, self._spec, [f.spec for f in self._fields],
                   self._chunk, mode=self._mode, rank=vrank,
                   world_size=vworld, workers=self._threads,
                   seed=self._seed, epoch=epoch, index=self._index,
                   drop_last=self._drop_last, last_batch="keep", **opts)

    def _stream(self, vrank, vworld, epoch, start, spe):
        """The samples of virtual rank vrank of vworld from position start;
        yields (sample, position after it)."""
        chunk = self._chunk
        loader = self._loader(vrank, vworld, epoch, start // chunk, spe)
        skip = start % chunk
        pos = start - skip
        try:
            for batch in loader:
                with batch:
                    rows = self._rows(batch)
                for s in rows:
                    pos += 1
                    if skip:
                        skip -= 1
                        continue
                    yield s, pos
        finally:
            loader.close()

    def _rows(self, batch):
        n = batch.rows
        keys, urls = batch.sample_keys, batch.urls
        valid = batch.valid.tolist()
        cols = []
        for i, f in enumerate(self._fields):
            v = batch[i]
            if f.post == "array":
                a = np.array(v)  # one copy out of the slot
                cols.append(list(a))
            elif f.post == "int":
                cols.append(np.asarray(v).tolist())
            else:
                cols.append(list(v))  # bytes, made from the slot
        out = []
        for r in range(n):
            s = {"__key__": keys[r], "__url__": urls[r],
                 "__valid__": bool(valid[r])}
            for f, col in zip(self._fields, cols):
                s[f.key] = self._post(f, col[r], valid[r], keys[r])
            out.append(s)
        return out

    def _post(self, f, v, valid, key):
        p = f.post
        if p in ("array", "int", "bytes"):
            return v
        if not valid and not len(v):
            # A failed sample's row (no data). An invalid row with data is
            # exact mode's padding: a repeat, decoded as its sample.
            return None if p != "text" else ""
        try:
            return decode_field(p, v, self._image)
        except Exception as e:
            raise ValueError(f"Dataset: sample {key!r}, field {f.name!r}: "
                             f"cannot decode as {p}: {e}") from e

    def _plan(self):
        """[(vrank, vworld, epoch, start, samples_per_epoch)] this worker
        reads in this iteration, in order, and the state to record."""
        wid, nw = _worker()
        rank, world = self._rank_world()
        spe = None
        if self._spe is not None:
            per, extra = divmod(int(self._spe), nw)
            spe = per + (1 if wid < extra else 0)
        pos = self._pos
        if self._resume is not None and self._resume["epoch"] == self.epoch:
            r = self._resume
            if r["workers"] != nw:
                # The interrupted epoch with the old split, its streams
                # dealt to this run's workers.
                out = []
                for s in range(wid, r["workers"], nw):
                    st = r["streams"].get(s, 0)
                    ospe = None
                    if self._spe is not None:
                        per, extra = divmod(int(self._spe), r["workers"])
                        ospe = per + (1 if s < extra else 0)
                    out.append((rank * r["workers"] + s, world * r["workers"],
                                self.epoch, st, ospe, s))
                return out
            pos = r["streams"].get(wid, 0)
        elif pos is None or pos[0] != self.epoch:
            pos = 0
        else:
            pos = pos[1]
        return [(rank * nw + wid, world * nw, self.epoch, pos, spe, wid)]

    def _samples(self):
        wid, nw = _worker()
        plan = self._plan()
        # Finishing an epoch begun with another worker count: the state
        # keeps that count and the old streams' positions.
        resuming = (self._resume is not None
                    and self._resume["epoch"] == self.epoch
                    and self._resume["workers"] != nw)
        streams = {}
        if resuming:
            streams = dict(self._resume["streams"])
        for vrank, vworld, epoch, start, spe, sid in plan:
            for s, p in self._stream(vrank, vworld, epoch, start, spe):
                if resuming:
                    streams[sid] = p
                    self._state = {"epoch": epoch,
                                   "workers": self._resume["workers"],
                                   "streams": dict(streams)}
                else:
                    self._state = {"epoch": epoch, "workers": nw,
                                   "streams": {wid: p}}
                yield s
        # The epoch over: the next iteration starts the next one.
        self._resume = None
        self._pos = None

    def __iter__(self):
        it = self._samples()
        for stage in self._stages:
            it = stage(it)
        return it

    # -- state -----------------------------------------------------------
    def state_dict(self):
        """This worker's position (StatefulDataLoader calls it in each
        worker): the epoch, the worker count and the samples yielded from
        each of its streams."""
        st = self._state or {"epoch": self.epoch, "workers": _worker()[1],
                             "streams": {}}
        return {"version": _STATE_VERSION, "epoch": st["epoch"],
                "workers": st["workers"],
                "streams": {str(k): v for k, v in st["streams"].items()},
                "seed": self._seed, "mode": self._mode,
                **self._state_options()}

    def _state_options(self):
        """The options a state's positions depend on (_STATE_KEYS)."""
        spec = self._spec
        if isinstance(spec, bytes):
            spec = spec.decode("utf-8", "surrogateescape")
        index = self._index
        if isinstance(index, bytes):
            index = index.decode("utf-8", "surrogateescape")
        data = hashlib.sha256(repr((spec, index)).encode(
            "utf-8", "surrogateescape")).hexdigest()[:16]
        return {"world_size": self._rank_world()[1],
                "drop_last": self._drop_last,
                "shuffle_buffer": int(self._shuffle_buffer or 0),
                "samples_per_epoch": None if self._spe is None
                else int(self._spe),
                "chunk": self._chunk, "data": data}

    def load_state_dict(self, state):
        """Resumes at state: one worker's state (StatefulDataLoader, same
        num_workers), or the state_dict() of a StatefulDataLoader or a list
        of the workers' states, which may come from another num_workers
        (call it on the dataset before making the DataLoader)."""
        states = _worker_states(state)
        if not states:
            return
        mine = None
        for s in states:
            if s.get("version") == 1:
                raise ValueError("Dataset.load_state_dict: a version 1 "
                                 "state, which does not record the world "
                                 "size and options its positions depend on "
                                 "(not resumable safely)")
            if s.get("version") != _STATE_VERSION:
                raise ValueError(f"Dataset.load_state_dict: not a "
                                 f"wds.Dataset state: {s!r}")
            mine = self._state_options() if mine is None else mine
            for k in _STATE_KEYS:
                if s.get(k) != mine[k]:
                    what = ("the data (spec/index fingerprint)"
                            if k == "data" else k)
                    raise ValueError(
                        f"Dataset.load_state_dict: the state was saved with "
                        f"{what} {s.get(k)!r}, this dataset has {mine[k]!r}: "
                        f"its positions would resume another split or order")
            if s["seed"] != self._seed or s["mode"] != self._mode:
                raise ValueError(f"Dataset.load_state_dict: seed/mode "
                                 f"{s['seed']!r}/{s['mode']!r} are not this "
                                 f"dataset's {self._seed!r}/{self._mode!r}")
        epoch = max(s["epoch"] for s in states)
        workers = {s["workers"] for s in states if s["epoch"] == epoch}
        if len(workers) != 1:
            raise ValueError(f"Dataset.load_state_dict: states of different "
                             f"worker counts {sorted(workers)}")
        streams = {}
        for s in states:
            if s["epoch"] == epoch:
                for k, v in s["streams"].items():
                    streams[int(k)] = max(streams.get(int(k), 0), int(v))
        self.epoch = epoch
        self._resume = {"epoch": epoch, "workers": workers.pop(),
                        "streams": streams}
        self._state = None


# The option list, from the library's table: the rows wds.Dataset takes
# (its own keywords and **loader_options), not those it refuses.
_DATASET_SKIP = ("resume_batches", "batch_size", "workers", "last_batch",
                 "jpeg_decode", "eager_next_epoch")
Dataset.__doc__ += _option_doc(skip=_DATASET_SKIP)


def _worker_states(state):
    """The wds.Dataset states inside a StatefulDataLoader's state_dict, a
    list of them, or one."""
    if isinstance(state, dict) and "version" in state:
        return [state]
    if isinstance(state, (list, tuple)):
        out = []
        for s in state:
            out += _worker_states(s)
        return out
    if isinstance(state, dict):
        out = []
        snap = state.get("_snapshot")
        if isinstance(snap, dict):
            ws = snap.get("_worker_snapshots", {})
            for w in ws.values():
                ds = w.get("dataset_state") if isinstance(w, dict) else None
                if ds is not None:
                    out += _worker_states(ds)
            if not ws:
                main = snap.get("_main_snapshot", {})
                out += _worker_states(main.get("dataset_state"))
        elif "dataset_state" in state:
            out += _worker_states(state["dataset_state"])
        return out
    return []


class _ResumingLoader(Loader):
    """A wds.Loader opened at a position (epoch, batches) at once."""

    def __init__(self, batches, *a, **kw):
        self._start_batches = batches
        super().__init__(*a, **kw)


# -- stages (classes: picklable under spawn) and collation ------------------
class _MapAll:
    def __init__(self, fn):
        self.fn = fn

    def __call__(self, it):
        return map(self.fn, it)


class _Batched:
    def __init__(self, n, collation_fn, partial, ragged):
        self.n, self.collation_fn = n, collation_fn
        self.partial, self.ragged = partial, ragged

    def _collate(self, rows):
        if self.collation_fn is not None:
            return self.collation_fn(rows)
        return default_collate(rows, self.ragged)

    def __call__(self, it):
        buf = []
        for s in it:
            buf.append(s)
            if len(buf) == self.n:
                yield self._collate(buf)
                buf = []
        if buf and self.partial:
            yield self._collate(buf)


def _is_tensor(x):
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _pad_stack(arrs):
    shape = tuple(max(s) for s in zip(*(a.shape for a in arrs)))
    out = np.zeros((len(arrs),) + shape, dtype=np.result_type(*arrs))
    for i, a in enumerate(arrs):
        out[(i,) + tuple(slice(0, d) for d in a.shape)] = a
    return out


def default_collate(rows, ragged="list"):
    """Samples (dicts, tuples or values) into one batch: same-shape arrays
    and tensors stacked, numbers as an array (a tensor when torch is
    imported), str/bytes/other objects as lists; arrays of different
    shapes as a list (ragged="list") or zero-padded to the largest shape
    (ragged="pad")."""
    first = rows[0]
    if isinstance(first, collections.abc.Mapping):
        return {k: default_collate([r[k] for r in rows], ragged)
                for k in first}
    if isinstance(first, tuple):
        return tuple(default_collate(list(c), ragged) for c in zip(*rows))
    if _is_tensor(first):
        import torch

        if all(r.shape == first.shape for r in rows):
            return torch.stack(rows)
        if ragged == "pad" and all(r.ndim == first.ndim for r in rows):
            return torch.from_numpy(_pad_stack([r.numpy() for r in rows]))
        return list(rows)
    if isinstance(first, np.ndarray):
        if all(r.shape == first.shape for r in rows):
            out = np.stack(rows)
        elif ragged == "pad" and all(r.ndim == first.ndim for r in rows):
            out = _pad_stack(rows)
        else:
            return list(rows)
        return _maybe_tensor(out)
    if isinstance(first, (bool, int, float, np.number)) and \
            not isinstance(first, (str, bytes)):
        return _maybe_tensor(np.asarray(rows))
    return list(rows)


def _maybe_tensor(a):
    import sys

    torch = sys.modules.get("torch")
    if torch is None or a.dtype.kind not in "biuf":
        return a
    return torch.from_numpy(np.ascontiguousarray(a))
