"""Batches on a GPU: wds.Loader(device=...) and Batch.to(device).

A batch lives in one of the loader's slots, pinned host memory when wds was
built with CUDA, so a copy from it with non_blocking=True is a DMA that runs
after the call returns. The slot must not go back to the pool (where a
worker refills it) before that copy has read it. Here:

- the copies run on a CUDA stream the loader owns (one per device), an event
  is recorded after them, and the consumer's current stream waits on that
  event (no host synchronisation); the device tensors are marked as used by
  the consumer's stream (record_stream), so the caching allocator does not
  hand their memory to the next copy while the consumer still reads it;
- the host tensors the copy reads (they keep the slot) are held in a queue of
  fences until the event has completed; the loader polls the queue before each
  batch and, when as many slots are behind fences as the pool can spare,
  waits for the oldest (the GPU is behind by that many batches).

The engine (_TorchCuda) is the seam: tests give a stand-in whose copies run
late, when their event completes, reading the slot's memory by address as a
DMA does.
"""

import collections
import threading

_BYTES = object()  # a field that stays on the host


def resolve(device):
    """torch.device for device= ("cuda", "cuda:N", a torch.device, an int),
    checked against this machine; errors say what to do."""
    try:
        import torch
    except ImportError:
        raise ImportError("wds: device= needs PyTorch (pip install torch); "
                          "without it, use the numpy batches") from None
    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device("cuda", device)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device={device!r}: not a device ({e})") from None
    if dev.type != "cuda":
        raise ValueError(f"device={device!r}: batches are copied to CUDA "
                         f"devices only; leave device unset for host batches")
    if not torch.cuda.is_available():
        raise RuntimeError(f"device={device!r}: torch sees no CUDA GPU "
                           f"(torch.cuda.is_available() is False)")
    n = torch.cuda.device_count()
    index = torch.cuda.current_device() if dev.index is None else dev.index
    if index >= n:
        raise ValueError(f"device={device!r}: this machine has {n} GPU"
                         f"{'' if n == 1 else 's'} (cuda:0..cuda:{n - 1})")
    return torch.device("cuda", index)


class _TorchCuda:
    """Copies host tensors to one CUDA device on a stream of its own."""

    def __init__(self, device):
        import torch

        self._torch = torch
        self.device = device
        self.stream = torch.cuda.Stream(device=device)
        self.jpeg = None  # the GPU JPEG decoder, made by gpu_jpeg()

    def copy(self, host, made=None):
        """{name: device tensor}, event: the copies of host's tensors,
        queued on the engine's stream, plus the tensors in made (already
        written on that stream: decoded images); the current stream waits
        for them all."""
        torch = self._torch
        consumer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            out = {n: t.to(self.device, non_blocking=True)
                   for n, t in host.items()}
            out.update(made or {})
            ev = torch.cuda.Event()
            ev.record(self.stream)
        consumer.wait_event(ev)
        for t in out.values():
            t.record_stream(consumer)
        return out, ev

    def gpu_jpeg(self):
        """The GPU JPEG decoder of jpeg_decode="gpu" on this device (one per
        engine, shared by its loaders: its calls are serialised by a lock of
        its own, wds/gpu_jpeg.h), or wds.OpenError saying why there is none
        (a build without CUDA or nvjpeg.h, no GPU, no libnvjpeg)."""
        with _engines_lock:
            if self.jpeg is None:
                from . import _wds

                _nvjpeg_hint()
                self.jpeg = _wds.gpu_jpeg_open(self.device.index)
        return self.jpeg

    def decode(self, batch, i, shape):
        """Field i of batch (a _Batch) decoded by the GPU JPEG decoder into
        a new uint8 tensor (rows, H, W, C) on the device, queued on the
        engine's stream (ordered before the copies that follow)."""
        torch = self._torch
        with torch.cuda.stream(self.stream):
            out = torch.empty((batch.rows,) + tuple(shape), dtype=torch.uint8,
                              device=self.device)
            self.jpeg.decode(batch, i, out.data_ptr(),
                             self.stream.cuda_stream)
        return out

    def done(self, ev):
        return ev.query()

    def synchronize(self):
        """Waits for everything queued on the engine's stream."""
        self.stream.synchronize()

    def wait(self, ev):
        ev.synchronize()


_engines = {}
_engines_lock = threading.Lock()


def _nvjpeg_hint():
    """Points WDS_NVJPEG_LIBRARY at the libnvjpeg of this Python's
    nvidia-nvjpeg wheel (or torchvision's copy) when it is not set: the C
    library also looks in the usual places (wds/gpu_jpeg.h)."""
    import glob
    import importlib.util
    import os

    if os.environ.get("WDS_NVJPEG_LIBRARY"):
        return
    dirs = []
    for mod in ("nvidia.cu13", "nvidia.nvjpeg", "torchvision"):
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            spec = None
        for d in (spec.submodule_search_locations or []) if spec else []:
            dirs += [os.path.join(d, "lib"), d, d + ".libs"]
    for d in dirs:
        found = sorted(glob.glob(os.path.join(d, "libnvjpeg*.so*")))
        if found:
            os.environ["WDS_NVJPEG_LIBRARY"] = found[0]
            return


def engine(device):
    """The copy engine for a device (one stream per device and process)."""
    with _engines_lock:
        e = _engines.get(device)
        if e is None:
            e = _engines[device] = _TorchCuda(device)
        return e


class Fences:
    """Host memory behind copies still running: entries (engine, event,
    keep, batch handle or None), in the order the copies were queued. An
    entry's `keep` (the host tensors the copy reads, which hold the slot) is
    dropped and its batch handle released once engine.done(event). Safe to
    use from several threads (a lock; reentrant, as the garbage collector
    may drain a queue from within one); an entry whose done() or wait()
    raises stays queued."""

    __slots__ = ("_q", "_lock")

    def __init__(self):
        self._q = collections.deque()
        self._lock = threading.RLock()

    def __len__(self):
        return len(self._q)

    def add(self, eng, ev, keep, handle=None):
        with self._lock:
            self._q.append([eng, ev, keep, handle])

    @staticmethod
    def _free(entry):
        handle = entry[3]
        entry[2] = entry[3] = None  # the host tensors go, then the slot
        if handle is not None:
            handle.release()

    def poll(self):
        """Frees every entry whose copy is over."""
        with self._lock:
            q = self._q
            for _ in range(len(q)):
                e = q.popleft()
                try:
                    done = e[0].done(e[1])
                except BaseException:
                    q.appendleft(e)
                    raise
                if done:
                    self._free(e)
                else:
                    q.append(e)

    def wait_oldest(self):
        """Waits for the oldest copy and frees it; False when none."""
        with self._lock:
            if not self._q:
                return False
            e = self._q[0]
            e[0].wait(e[1])
            self._q.popleft()
            self._free(e)
            return True

    def reserve(self, limit):
        """Frees what is done, then waits until fewer than limit remain."""
        self.poll()
        while len(self._q) >= max(1, limit):
            self.wait_oldest()

    def drain(self):
        while self.wait_oldest():
            pass

    def __del__(self):
        # The last owner gone (a Batch outliving its Loader): copies still
        # reading slots finish first.
        try:
            self.drain()
        except Exception:  # interpreter shutdown: torch may be gone
            pass


def host_tensors(batch):
    """{name: CPU tensor over the slot} for the fixed-size fields, plus
    "__valid__"; bytes fields map to _BYTES."""
    import torch

    from ._wds import BytesField

    out = {}
    for i, n in enumerate(batch._names):
        a = batch._field(i)
        out[n] = _BYTES if isinstance(a, BytesField) else torch.from_numpy(a)
    out["__valid__"] = torch.from_numpy(batch.valid)
    return out


def to_device(batch, eng, fences, handle=None):
    """A DeviceBatch of batch (a wds.Batch): its tensors copied by eng, its
    bytes fields, keys, urls and sources read now. The host tensors wait in
    fences until the copies are over; handle (the loader's own batch handle)
    is released then. With the engine's GPU JPEG decoder (jpeg_decode=
    "gpu"), the planned JPEG fields are decoded on the device first (a row
    that cannot be decoded under on_error="skip" turns invalid before
    __valid__ is copied)."""
    made = {}
    try:
        if getattr(eng, "jpeg", None) is not None:
            for i, n in enumerate(batch._names):
                shape = eng.jpeg.shape(batch._b, i)
                if shape is not None:
                    made[n] = eng.decode(batch._b, i, shape)
        host = host_tensors(batch)
        copy = {n: t for n, t in host.items() if t is not _BYTES}
        for n in made:
            copy.pop(n, None)
        dev, ev = eng.copy(copy, made) if made else eng.copy(copy)
    except BaseException:
        # Work queued before the failure may still read the slot, which
        # goes back when the caller drops the batch: wait for it first.
        sync = getattr(eng, "synchronize", None)
        if sync is not None:
            sync()
        raise
    fields = {}
    for i, n in enumerate(batch._names):
        fields[n] = (dev[n] if n in made else
                     list(batch._field(i)) if host[n] is _BYTES else dev[n])
    db = DeviceBatch(fields, dev["__valid__"], batch.keys, batch.urls,
                     batch.sources.copy(), batch.epoch, batch.index,
                     len(batch))
    fences.add(eng, ev, copy, handle)
    return db


class DeviceBatch:
    """One batch on a CUDA device (wds.Loader(device=...), Batch.to()).

    batch["jpg;png"] or batch[0] is a torch tensor on the device (a bytes
    field: a list of bytes, on the host); batch.valid is a bool tensor on the
    device; batch.keys and batch.urls (lists of str), batch.sources (numpy
    uint32), batch.epoch and batch.index stay on the host. The tensors are
    ready for work queued on the stream that was current when the batch was
    made (the loader's copies ran on a stream of their own; that stream
    waits for them); other streams must wait for it. The loader's slot has
    gone back already, or goes back by itself once the copies are over:
    there is nothing to release.
    """

    __slots__ = ("_fields", "_names", "valid", "keys", "urls", "sources",
                 "epoch", "index", "_rows")

    def __init__(self, fields, valid, keys, urls, sources, epoch, index, rows):
        self._fields = fields
        self._names = tuple(fields)
        self.valid = valid
        self.keys = keys
        self.urls = urls
        self.sources = sources
        self.epoch = epoch
        self.index = index
        self._rows = rows

    def __len__(self):
        return self._rows

    @property
    def names(self):
        return list(self._names)

    def __getitem__(self, name):
        if isinstance(name, int):
            if not -len(self._names) <= name < len(self._names):
                raise IndexError(f"DeviceBatch: field {name} out of range")
            name = self._names[name]
        return self._fields[name]

    def __iter__(self):
        return iter(self._names)

    def items(self):
        return list(self._fields.items())

    def torch(self):
        """{name: tensor (a bytes field: list of bytes)} plus "__valid__",
        as Batch.torch() gives them."""
        out = dict(self._fields)
        out["__valid__"] = self.valid
        return out

    def release(self):
        """Nothing to give back (the slot went back with the copies); kept
        so that code written for wds.Batch runs unchanged."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __repr__(self):
        dev = getattr(self.valid, "device", "?")
        return (f"<wds.DeviceBatch epoch={self.epoch} index={self.index} "
                f"rows={self._rows} device={dev} fields={list(self._names)}>")
