"""wds.Loader(..., transform=fn): a Python function on each decoded sample.

The C loader decodes and batches as always; each batch it gives is handed to
a pool of worker processes through shared memory, and the batch the user
gets is the transformed one, its rows in one shared block:

    C loader slot --(one copy: the rows' arrays and bytes)--> input block
      -> worker processes: sample dict (wds.Dataset's form) -> fn -> row r
         written straight into the output block (no copy back)
      -> wds.Batch over the output block (numpy views; device= copies it)

- The pool starts before the C loader opens (so that start_method="fork" is
  allowed while the process has no other thread; "forkserver" is the
  default, "spawn" works too). Each batch is cut into one contiguous run of
  rows per worker; up to `depth` batches are in flight, so the workers
  transform the next batches while the user trains on this one. The C
  loader's own slot goes back as soon as its rows are in the input block.
- Exactness: row r of the output is row r of the C loader's batch (same
  samples, same order); rows the C loader marks invalid (padding, skipped)
  are not given to fn, stay invalid and are zero.
- Randomness: before fn runs on a sample, Python's `random`, numpy's global
  generator and torch's (when imported) are seeded from (seed, epoch, the
  sample's key), so random augmentations do not depend on the number of
  workers, on which worker took a row, or on a resume.
- Resume: the C loader has handed out the in-flight batches already, so the
  loader keeps the C state saved just before each one was taken; state_dict
  gives the one before the oldest batch not yet yielded.
- Output fields: fn returns a dict {name: array, tensor or number} (names
  starting with "__" are dropped) or a tuple/list (fields "0", "1", ...).
  The shapes and dtypes are fixed by transform_fields= or by the first
  batch's first valid row; a row that differs is an error naming the field,
  the sample's key and both shapes (under on_error="skip": the row turns
  invalid, counted in stats()["transform_skipped"]).
- Failures: fn raising is a TransformError naming the sample's key and shard
  with the worker's traceback; a worker that dies is a TransformError naming
  it and its exit status (never a hang); transform_timeout bounds the wait
  for a batch (TimeoutError). After any of them the pool is stopped and the
  loader must be closed. Workers ignore SIGINT (Ctrl-C reaches the consumer
  only) and exit when their pipe to the consumer closes, so no process
  outlives the loader; close() (and the loader's finalizer) stops the pool
  and unlinks every shared memory block.
"""

import collections
import gc
import hashlib
import multiprocessing
import os
import pickle
import random
import secrets
import signal
import sys
import time
import traceback
import weakref
from multiprocessing import connection as _mpc
from multiprocessing import shared_memory

import numpy as np

from ._decode import decode_field

_ALIGN = 64
SHM_PREFIX = "wds_tx"  # /dev/shm/wds_tx<pid>_<n>_<random>


class TransformError(RuntimeError):
    """The transform= function failed on a sample (key, url and the worker's
    traceback as attributes), or a transform worker died."""

    def __init__(self, message, key=None, url=None, worker_traceback=None):
        super().__init__(message)
        self.key = key
        self.url = url
        self.worker_traceback = worker_traceback

    def __reduce__(self):
        return (TransformError, (str(self), self.key, self.url,
                                 self.worker_traceback))


def _round(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _sample_seed(seed, epoch, key):
    h = hashlib.blake2b(f"{seed}:{epoch}:{key}".encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


def _seed_all(s):
    random.seed(s)
    np.random.seed(s & 0xFFFFFFFF)
    torch = sys.modules.get("torch")
    if torch is not None:  # the CPU generator (torch.manual_seed: CUDA's too)
        torch.default_generator.manual_seed(s & 0x7FFFFFFFFFFFFFFF)


def _rng_states():
    torch = sys.modules.get("torch")
    return (random.getstate(), np.random.get_state(),
            None if torch is None else torch.random.get_rng_state())


def _rng_restore(st):
    random.setstate(st[0])
    np.random.set_state(st[1])
    torch = sys.modules.get("torch")
    if st[2] is not None and torch is not None:
        torch.random.set_rng_state(st[2])


def _decode(post, v, image, key, name):
    """wds.Dataset's decoding of one field's raw value (its _post)."""
    if post in ("array", "int", "bytes"):
        return v
    try:
        return decode_field(post, v, image)
    except Exception as e:
        raise ValueError(f"transform: sample {key!r}, field {name!r}: "
                         f"cannot decode as {post}: {e}") from e


def _as_fields(out, key):
    """fn's result as [(name, ndarray)]."""
    if isinstance(out, dict):
        items = [(str(k), v) for k, v in out.items()
                 if not str(k).startswith("__")]
    elif isinstance(out, (tuple, list)):
        items = [(str(i), v) for i, v in enumerate(out)]
    else:
        raise TypeError(f"transform: returned a {type(out).__name__} for "
                        f"sample {key!r}; return a dict of arrays (or a "
                        f"tuple of them)")
    res = []
    for name, v in items:
        if hasattr(v, "detach") and hasattr(v, "numpy"):  # a torch tensor
            v = v.detach().cpu().numpy()
        if isinstance(v, (str, bytes)) or v is None:
            raise TypeError(
                f"transform: field {name!r} of sample {key!r} is a "
                f"{type(v).__name__}: a batch holds fixed-shape arrays "
                f"(tokenize text to ids, or use wds.Dataset for ragged "
                f"fields)")
        a = np.asarray(v)
        if a.dtype == object:
            raise TypeError(f"transform: field {name!r} of sample {key!r} "
                            f"is not an array of numbers")
        res.append((name, a))
    return res


def _layout_of(fields):
    """[(name, shape, dtype str)] from fn's first result."""
    return [(n, tuple(a.shape), a.dtype.str) for n, a in fields]


def _check_row(layout, fields, key):
    got = dict(fields)
    names = [n for n, _, _ in layout]
    if set(got) != set(names):
        raise ValueError(
            f"transform: sample {key!r} gave fields {sorted(got)}, the batch "
            f"holds {sorted(names)}")
    out = []
    for n, shape, dt in layout:
        a = got[n]
        if tuple(a.shape) != shape:
            raise ValueError(
                f"transform: field {n!r} of sample {key!r} has shape "
                f"{tuple(a.shape)}, the batch holds {shape} (fixed by "
                f"transform_fields or the first sample)")
        if a.dtype.str != dt and not np.can_cast(a.dtype, np.dtype(dt),
                                                 "same_kind"):
            raise ValueError(
                f"transform: field {n!r} of sample {key!r} has dtype "
                f"{a.dtype}, the batch holds {np.dtype(dt)}")
        out.append(a)
    return out


def _out_offsets(layout, rows):
    offs, off = [], 0
    for _, shape, dt in layout:
        offs.append(off)
        off = _round(off + rows * int(np.prod(shape, dtype=np.int64)) *
                     np.dtype(dt).itemsize)
    return offs, max(off, _ALIGN)


def _out_views(buf, layout, offs, rows):
    base = np.frombuffer(buf, np.uint8)
    views = []
    for (_, shape, dt), off in zip(layout, offs):
        n = rows * int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
        views.append(base[off:off + n].view(np.dtype(dt))
                     .reshape((rows,) + shape))
    return base, views


class _Rows:
    """A batch's input rows as a worker (or the consumer) reads them: get(i,
    r) is field i of row r, before decoding."""

    def __init__(self, buf, desc):
        self.cols = []
        for d in desc["fields"]:
            if d[0] == "a":
                _, off, dt, shape, rows = d
                n = rows * int(np.prod(shape, dtype=np.int64)) * \
                    np.dtype(dt).itemsize
                self.cols.append(np.frombuffer(buf, np.uint8, n, off)
                                 .view(np.dtype(dt)).reshape((rows,) + shape))
            else:
                _, ooff, doff, rows = d
                offs = np.frombuffer(buf, np.int64, rows + 1, ooff).tolist()
                data = memoryview(buf)[doff:doff + offs[-1]]
                self.cols.append((offs, data))

    def get(self, i, r, post):
        c = self.cols[i]
        if isinstance(c, tuple):
            offs, data = c
            return bytes(data[offs[r]:offs[r + 1]])
        if post == "int":
            return int(c[r])
        return np.array(c[r])  # a copy: fn may keep it


def _run(fn, fspecs, image, rows, lo, hi, keys, urls, valid, epoch, seed,
         layout, outs, skip):
    """fn on rows lo..hi (valid ones). With a layout, each result is written
    into outs (views of the output block) and invalid rows are zeroed;
    returns (skipped rows, first results or None, error or None)."""
    skipped, first = [], None if layout is not None else {}
    for r in range(lo, hi):
        key = keys[r - lo]
        if not valid[r]:
            if layout is not None:
                for o in outs:
                    o[r] = 0
            continue
        try:
            s = {"__key__": key, "__url__": urls[r - lo], "__valid__": True}
            for i, (fkey, post, name) in enumerate(fspecs):
                s[fkey] = _decode(post, rows.get(i, r, post), image, key,
                                  name)
            _seed_all(_sample_seed(seed, epoch, key))
            fields = _as_fields(fn(s), key)
            if layout is None:
                first[r] = fields
                continue
            for o, a in zip(outs, _check_row(layout, fields, key)):
                o[r] = a
        except Exception as e:
            if not skip:
                return skipped, first, (r, e, traceback.format_exc())
            skipped.append(r)
            if layout is not None:
                for o in outs:
                    o[r] = 0
    return skipped, first, None


def _pickled_exc(e):
    try:
        b = pickle.dumps(e)
        pickle.loads(b)
        return b
    except Exception:
        return None


def _worker_main(conn, fn, fspecs, image, skip, wid):
    """One transform worker: tasks from conn until None or EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the consumer's
    if isinstance(fn, bytes):
        fn = pickle.loads(fn)
    blocks = {}

    def attach(name):
        b = blocks.get(name)
        if b is None:
            b = blocks[name] = _Shm(name=name)
        return b.buf

    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            break
        if task is None:
            break
        (bid, in_name, in_desc, lo, hi, keys, urls, epoch, seed, out_name,
         layout, offs, rows_n) = task
        rows = _Rows(attach(in_name), in_desc)
        outs = None
        if layout is not None:
            _, outs = _out_views(attach(out_name), layout, offs, rows_n)
        valid = in_desc["valid"]
        skipped, first, err = _run(fn, fspecs, image, rows, lo, hi, keys,
                                   urls, valid, epoch, seed, layout, outs,
                                   skip)
        del rows, outs
        if err is not None:
            r, e, tb = err
            conn.send(("err", bid, keys[r - lo], urls[r - lo], repr(e), tb,
                       _pickled_exc(e)))
        else:
            conn.send(("ok", bid, lo, skipped, first))


class _Shm(shared_memory.SharedMemory):
    """A SharedMemory whose finaliser leaves a mapping that numpy arrays
    still view to be unmapped with them (no "exported pointers" noise)."""

    def __del__(self):
        try:
            self.close()
        except BufferError:
            pass


class _Block:
    __slots__ = ("shm", "size", "pinned", "__weakref__")

    def __init__(self, size, counter):
        name = f"{SHM_PREFIX}{os.getpid()}_{counter}_{secrets.token_hex(4)}"
        self.shm = _Shm(name=name, create=True,
                                              size=size)
        self.size = size
        self.pinned = False


class TBatch:
    """The handle wds.Batch wraps for a transformed batch (the C batch's
    interface): fields are views of the output block; release() drops them,
    and the block goes back to the pool once no array taken from it is
    alive."""

    def __init__(self, pipe, block, layout, offs, rows, meta, valid):
        self.names = tuple(n for n, _, _ in layout)
        self.rows = rows
        self.epoch, self.index, self.keys, self.urls, self.sources = meta
        self.slot = -1
        base, self._views = _out_views(block.shm.buf, layout, offs, rows)
        weakref.finalize(base, pipe._give_back, block)
        self._valid = valid
        self._released = False

    def field(self, i):
        if self._released:
            raise ValueError("wds.Batch: released")
        return self._valid if i == -1 else self._views[i]

    def release(self):
        self._released = True
        self._views = ()


class Pipeline:
    """The pool and its in-flight batches for one wds.Loader."""

    def __init__(self, fn, fspecs, image, workers, start_method, timeout,
                 skip, seed, layout, depth, pin):
        self._fspecs = fspecs
        self._image = image
        self._fn = fn
        self._skip = skip
        self._seed = seed
        self._timeout = timeout
        self._layout = None if layout is None else [
            (str(n), tuple(int(x) for x in s), np.dtype(d).str)
            for n, (s, d) in layout.items()]
        self._depth = max(1, int(depth))
        self._pin = pin
        self._counter = 0
        self._bid = 0
        self._free_in, self._free_out = [], []
        self._all = []  # every block made: unlinked at close
        self._n_out = 0
        self._flight = collections.deque()
        self._broken = None
        self._closed = False
        self.skipped = 0
        self.workers = []
        self._conns = []
        self.start_method = None
        self._out_limit = self._depth + 8
        if workers:
            self._start(int(workers), start_method)
        self._final = weakref.finalize(self, Pipeline._shutdown,
                                       self.workers, self._conns, self._all)

    # -- the pool ---------------------------------------------------------
    def _start(self, n, method):
        if method is None:
            method = "forkserver" if "forkserver" in \
                multiprocessing.get_all_start_methods() else "spawn"
        if method not in ("fork", "forkserver", "spawn"):
            raise ValueError(f"Loader: transform_start_method {method!r}: "
                             f"expected 'forkserver', 'spawn' or 'fork'")
        if method == "fork":
            try:
                tasks = os.listdir("/proc/self/task")
                names = []
                for t in tasks:
                    with open(f"/proc/self/task/{t}/comm") as f:
                        names.append(f.read().strip())
            except OSError:
                tasks, names = [], []
            if len(tasks) != 1:
                raise ValueError(
                    f"Loader: transform_start_method='fork' with "
                    f"{len(tasks) or 'an unknown number of'} threads in this "
                    f"process ({', '.join(names)}; numpy's OpenBLAS starts "
                    f"one pool at import unless OPENBLAS_NUM_THREADS=1): a "
                    f"forked child would inherit their locks in any state; "
                    f"use 'forkserver' (the default) or 'spawn'")
            payload = self._fn
        else:
            try:
                payload = pickle.dumps(self._fn)
            except Exception as e:
                raise TypeError(
                    f"Loader: transform {self._fn!r} cannot be pickled for "
                    f"the {method!r} start method ({e}): define it at a "
                    f"module's top level (or a functools.partial of such a "
                    f"function)") from e
        ctx = multiprocessing.get_context(method)
        self.start_method = method
        try:
            for w in range(n):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker_main, name=f"wds-transform-{w}",
                                args=(child, payload, self._fspecs,
                                      self._image, self._skip, w),
                                daemon=True)
                p.start()
                child.close()
                self.workers.append(p)
                self._conns.append(parent)
        except BaseException:
            Pipeline._shutdown(self.workers, self._conns, [])
            raise

    @staticmethod
    def _shutdown(workers, conns, blocks):
        for c in conns:
            try:
                c.send(None)
            except Exception:
                pass
        deadline = time.monotonic() + 2.0
        for p in workers:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in workers:
            if p.is_alive():
                p.terminate()
                p.join(1.0)
            if p.is_alive():
                p.kill()
                p.join()
        for c in conns:
            c.close()
        del workers[:], conns[:]
        for b in blocks:
            if b.pinned:
                _unpin(b)
            try:
                b.shm.unlink()
            except FileNotFoundError:
                pass
            try:
                b.shm.close()
            except BufferError:  # arrays still view it: unmapped with them
                pass
        del blocks[:]

    def close(self):
        self._closed = True
        self._flight.clear()
        self._final()

    # -- blocks -----------------------------------------------------------
    def _block(self, free, size, limit=None):
        best = None
        for b in free:
            if b.size >= size and (best is None or b.size < best.size):
                best = b
        if best is None and limit is not None and self._n_out >= limit:
            gc.collect()  # batches dropped in a reference cycle
            for b in free:
                if b.size >= size and (best is None or b.size < best.size):
                    best = b
            if best is None:
                if not free:
                    return None
                old = min(free, key=lambda b: b.size)  # too small: replaced
                free.remove(old)
                self._all.remove(old)
                Pipeline._shutdown([], [], [old])
                self._n_out -= 1
        if best is not None:
            free.remove(best)
            return best
        self._counter += 1
        b = _Block(max(_round(size + size // 4), 1 << 16), self._counter)
        self._all.append(b)
        if free is self._free_out:
            self._n_out += 1
            if self._pin is not None:
                _pin(b, self._pin)
        return b

    def _give_back(self, block):
        if not self._closed:
            self._free_out.append(block)

    # -- batches ----------------------------------------------------------
    def _pack(self, batch):
        """The C batch's rows into an input block: (block, desc)."""
        parts, off = [], 0
        desc = {"fields": []}
        for i in range(len(batch.names)):
            a = batch._field(i)
            if isinstance(a, np.ndarray):
                off = _round(off)
                desc["fields"].append(("a", off, a.dtype.str, a.shape[1:],
                                       batch.rows))
                parts.append((off, a))
                off += a.nbytes
            else:
                items = list(a)
                offs = np.zeros(len(items) + 1, np.int64)
                np.cumsum([len(x) for x in items], out=offs[1:])
                off = _round(off)
                ooff = off
                off += offs.nbytes
                doff = off
                off += int(offs[-1])
                desc["fields"].append(("b", ooff, doff, batch.rows))
                parts.append((ooff, offs))
                parts.append((doff, b"".join(items)))
        blk = self._block(self._free_in, max(off, 1))
        dst = np.frombuffer(blk.shm.buf, np.uint8)
        for o, p in parts:
            src = np.frombuffer(p, np.uint8) if isinstance(p, bytes) else \
                np.ascontiguousarray(p).reshape(-1).view(np.uint8)
            dst[o:o + src.size] = src
        del dst
        return blk, desc

    def submit(self, batch, state):
        """Takes a C batch (wds.Batch), releases it once its rows are
        copied, and starts its transform; state: the C loader's state
        before it was taken."""
        rows = batch.rows
        valid = np.array(batch.valid, dtype=bool)
        meta = (batch.epoch, batch.index, list(batch.sample_keys),
                list(batch.urls), batch._b.sources)
        ent = {"state": state, "rows": rows, "meta": meta, "valid": valid,
               "skipped": [], "pending": 0, "first": {}, "err": None}
        if not self.workers:
            ent["batch"] = batch  # transformed in next(), in this thread
            self._flight.append(ent)
            return
        blk, desc = self._pack(batch)
        batch.release()
        desc["valid"] = valid.tolist()
        ent["in"] = blk
        self._bid += 1
        ent["bid"] = bid = self._bid
        self._dispatch(ent, blk, desc, bid)
        self._flight.append(ent)

    def _dispatch(self, ent, blk, desc, bid):
        rows = ent["rows"]
        layout = self._layout
        out = offs = None
        if layout is not None:
            offs, size = _out_offsets(layout, rows)
            out = self._block(self._free_out, size, self._out_limit)
            if out is None:
                from ._wds import InvalidError

                raise InvalidError(
                    "Loader: every transform output block is held (arrays "
                    "of earlier batches still alive): release batches, or "
                    "copy what you keep")
            ent["out"], ent["offs"] = out, offs
        epoch, _, keys, urls, _ = ent["meta"]
        n = len(self.workers)
        per = -(-rows // n) if rows else 0
        ent["pending"] = 0
        for w in range(n):
            lo, hi = w * per, min(rows, (w + 1) * per)
            if lo >= hi:
                continue
            try:
                self._conns[w].send((bid, blk.shm.name, desc, lo, hi,
                                     keys[lo:hi], urls[lo:hi], epoch,
                                     self._seed,
                                     None if out is None else out.shm.name,
                                     layout, offs, rows))
            except OSError:  # BrokenPipeError: the worker is gone
                self._died(w, ent)
            ent["pending"] += 1

    def head_state(self):
        return self._flight[0]["state"] if self._flight else None

    def in_flight(self):
        return len(self._flight)

    def full(self):
        return len(self._flight) >= (self._depth if self._layout is not None
                                     or not self.workers else 1)

    def _fail(self, exc):
        self._broken = exc
        Pipeline._shutdown(self.workers, self._conns, [])
        raise exc

    def drop(self):
        """Forgets the batches in flight (set_epoch, load_state_dict): their
        results are waited for and thrown away, so the pool stays in step."""
        while self._flight:
            ent = self._flight[0]
            ent["drop"] = True
            try:
                if self.workers and self._broken is None:
                    self._wait(ent)
            except Exception:
                pass
            self._flight.popleft()
            self._recycle(ent)

    def _recycle(self, ent):
        if ent.get("in") is not None:
            self._free_in.append(ent.pop("in"))
        if ent.get("out") is not None:
            self._free_out.append(ent.pop("out"))
        b = ent.pop("batch", None)
        if b is not None:
            b.release()

    def _wait(self, ent):
        """Collects every worker's reply for the oldest batch (replies come
        in order on each pipe)."""
        deadline = None if self._timeout is None else \
            time.monotonic() + float(self._timeout)
        while ent["pending"]:
            left = None if deadline is None else \
                max(0.0, deadline - time.monotonic())
            ready = _mpc.wait(self._conns + [p.sentinel for p in
                                             self.workers], left)
            if not ready:
                self._fail(TimeoutError(
                    f"Loader: transform of batch {ent['meta'][0]}:"
                    f"{ent['meta'][1]} not done after {self._timeout} s "
                    f"(transform_timeout); the transform workers were "
                    f"stopped"))
            for w, c in enumerate(self._conns):
                if c not in ready:
                    continue
                try:
                    msg = c.recv()
                except (EOFError, OSError):
                    self._died(w, ent)
                self._reply(msg, ent)
            for w, p in enumerate(self.workers):
                if p.sentinel in ready and not self._conns[w].poll():
                    self._died(w, ent)
        self._raise_err(ent)

    def _died(self, w, ent):
        p = self.workers[w]
        p.join(1.0)
        code = p.exitcode
        how = (f"killed by signal {signal.Signals(-code).name}"
               if code is not None and code < 0 else f"exit status {code}")
        self._fail(TransformError(
            f"Loader: transform worker {w} (pid {p.pid}) died ({how}) while "
            f"transforming batch {ent['meta'][0]}:{ent['meta'][1]}; the "
            f"transform workers were stopped"))

    def _reply(self, msg, ent):
        flight = {e["bid"]: e for e in self._flight}
        e = flight.get(msg[1])
        if e is None:
            return
        e["pending"] -= 1
        if msg[0] == "err":
            _, _, key, url, what, tb, pexc = msg
            if e["err"] is None:
                e["err"] = (key, url, what, tb, pexc)
        else:
            _, _, lo, skipped, first = msg
            e["skipped"].extend(skipped)
            if first:
                e["first"].update(first)

    def _raise_err(self, e):
        if e["err"] is not None and not e.get("drop"):
            key, url, what, tb, pexc = e["err"]
            err = TransformError(
                f"Loader: transform raised {what} on sample {key!r} (shard "
                f"{url}); the worker's traceback:\n{tb}", key, url, tb)
            cause = None
            if pexc is not None:
                try:
                    cause = pickle.loads(pexc)
                except Exception:
                    cause = None
            err.__cause__ = cause
            self._broken = err
            Pipeline._shutdown(self.workers, self._conns, [])
            raise err

    def next(self):
        """The oldest batch in flight, transformed: a TBatch."""
        if self._broken is not None:
            raise TransformError(f"Loader: the transform pool stopped after "
                                 f"an earlier error ({self._broken}); close "
                                 f"the loader") from self._broken
        ent = self._flight[0]
        if not self.workers:
            return self._local(ent)
        self._wait(ent)
        if self._layout is None:
            self._fix_layout(ent)
        self._flight.popleft()
        return self._finish(ent)

    def _finish(self, ent):
        valid = ent["valid"]
        if ent["skipped"]:
            valid[ent["skipped"]] = False
            self.skipped += len(ent["skipped"])
        if ent.get("in") is not None:
            self._free_in.append(ent.pop("in"))
        out = ent.pop("out")
        return TBatch(self, out, self._layout, ent["offs"], ent["rows"],
                      ent["meta"], valid)

    def _fix_layout(self, ent):
        """The first batch: results came back pickled; they fix the layout,
        and the rows go into a block."""
        first = ent["first"]
        if not first:
            self._fail(TransformError(
                "Loader: the first transformed batch has no valid row to "
                "fix the output fields; give transform_fields="))
        r0 = min(first)
        self._layout = _layout_of(first[r0])
        self._write_rows(ent, first)

    def _write_rows(self, ent, results):
        rows = ent["rows"]
        offs, size = _out_offsets(self._layout, rows)
        out = self._block(self._free_out, size)
        _, outs = _out_views(out.shm.buf, self._layout, offs, rows)
        keys = ent["meta"][2]
        try:
            for r in range(rows):
                fields = results.get(r)
                if fields is None:
                    for o in outs:
                        o[r] = 0
                    continue
                try:
                    arrs = _check_row(self._layout, fields, keys[r])
                except ValueError:
                    if not self._skip:
                        raise
                    ent["skipped"].append(r)
                    for o in outs:
                        o[r] = 0
                    continue
                for o, a in zip(outs, arrs):
                    o[r] = a
        except BaseException:
            del outs
            self._free_out.append(out)
            raise
        del outs
        ent["out"], ent["offs"] = out, offs

    def _local(self, ent):
        """transform_workers=0: fn in this thread (the global generators'
        states kept around it)."""
        batch = ent["batch"]
        epoch, _, keys, urls, _ = ent["meta"]
        fspecs = self._fspecs

        class _Direct:
            def get(_, i, r, post):
                a = batch._field(i)
                if isinstance(a, np.ndarray):
                    return int(a[r]) if post == "int" else np.array(a[r])
                return a[r]

        saved = _rng_states()
        try:
            skipped, first, err = _run(self._fn, fspecs, self._image,
                                       _Direct(), 0, ent["rows"], keys, urls,
                                       ent["valid"], epoch, self._seed, None,
                                       None, self._skip)
        finally:
            _rng_restore(saved)
        self._flight.popleft()
        batch.release()
        ent.pop("batch", None)
        if err is not None:
            r, e, tb = err
            raise TransformError(
                f"Loader: transform raised {e!r} on sample {keys[r]!r} "
                f"(shard {urls[r]})", keys[r], urls[r], tb) from e
        ent["skipped"] = list(skipped)
        if self._layout is None:
            if not first:
                raise TransformError(
                    "Loader: the first transformed batch has no valid row "
                    "to fix the output fields; give transform_fields=")
            self._layout = _layout_of(first[min(first)])
        self._write_rows(ent, first)
        return self._finish(ent)


def _pin(block, device):
    """Registers an output block with CUDA (page-locked), so device= copies
    run asynchronously from it as from the C loader's pinned slots."""
    try:
        import torch

        if not torch.cuda.is_available():
            return
        a = np.frombuffer(block.shm.buf, np.uint8)
        ptr = a.ctypes.data
        del a
        if torch.cuda.cudart().cudaHostRegister(ptr, block.size, 0) == 0:
            block.pinned = ptr
    except Exception:  # pageable memory still copies, synchronously
        block.pinned = False


def _unpin(block):
    try:
        import torch

        torch.cuda.cudart().cudaHostUnregister(block.pinned)
    except Exception:
        pass
    block.pinned = False
