"""wds.Loader(device=...) and Batch.to(): device batches equal the host
batches, and a slot goes back to the pool only once the copy that reads it
is over.

Without a GPU the copy engine is a stand-in whose copies complete late: a
copy reads the slot's memory by address (as a DMA does, holding no
reference) only when its event completes, some polls after it was queued or
when waited for. Were a slot released before that, a worker would have
refilled it and the copy would read another batch's rows. The control
(release at once) shows that it would. On a GPU (marker gpu) the real
engine runs with a long kernel queued on the loader's copy stream before
every copy.

PyTorch is not installed beside the ASan build's preloaded sanitizer
runtime: there only the tests that need no torch run (what device= says
without it), and each of the others is skipped, saying so."""
import ctypes
import sys

import numpy as np
import pytest

import wds
from wds import _device

try:
    import torch
except ImportError:
    torch = None
# Each test that needs torch carries it; the module's others run without.
needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed "
                                 "(the ASan build runs without it)")

FIELDS = "npy,cls,txt:bytes"
EPOCHS = 3


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("device")
    k = 0
    with wds.ShardWriter(str(d / "d-%03d.tar"), maxcount=10, sync=False) as w:
        for s in range(4):
            for i in range(10):
                w.write({"__key__": f"k{k:04d}",
                         "npy": np.full((3, 5), k, dtype=np.float32),
                         "cls": k % 7, "txt": f"t{k}" * (1 + k % 3)})
                k += 1
    return str(d / "d-{000..003}.tar")


def loader(spec, **kw):
    kw.setdefault("prefetch", 2)
    return wds.Loader(spec, FIELDS, 4, rank=0, world_size=1, workers=2,
                      shuffle_buffer=12, seed=5, **kw)


def host_epochs(spec):
    """Every batch of EPOCHS epochs as copied numpy arrays."""
    out = []
    with loader(spec) as l:
        for _ in range(EPOCHS):
            for b in l:
                with b:
                    out.append({"npy": b["npy"].copy(), "cls": b["cls"].copy(),
                                "txt": list(b["txt"]), "valid": b.valid.copy(),
                                "keys": b.sample_keys, "epoch": b.epoch,
                                "index": b.index})
    return out


class LateEvent:
    """A copy that has not run yet: (source address, bytes, destination)."""

    def __init__(self, engine, host):
        self.polls = engine.polls
        self.parts = []
        self.out = {}
        for n, t in host.items():
            dst = torch.empty_like(t)
            self.parts.append((t.data_ptr(), t.numel() * t.element_size(), dst))
            self.out[n] = dst
        self.copied = False

    def complete(self):
        if not self.copied:
            for addr, size, dst in self.parts:
                ctypes.memmove(dst.data_ptr(), addr, size)
            self.copied = True


class LateEngine:
    """The seam's stand-in for _TorchCuda: copies complete `polls` polls
    after they were queued, or when waited for; early=True also says done
    at once without copying (the race a fence prevents)."""

    device = "late"

    def __init__(self, polls=3, early=False):
        self.polls = polls
        self.early = early
        self.events = []
        self.waits = 0

    def copy(self, host):
        ev = LateEvent(self, host)  # holds addresses, not the tensors
        self.events.append(ev)
        return ev.out, ev

    def done(self, ev):
        if self.early:
            return True
        if not ev.copied:
            if ev.polls > 0:
                ev.polls -= 1
                return False
            ev.complete()
        return True

    def wait(self, ev):
        self.waits += 1
        ev.complete()

    def synchronize(self):
        for ev in self.events:
            ev.complete()


@pytest.fixture
def late(monkeypatch):
    engines = []

    def make(polls=3, early=False):
        e = LateEngine(polls, early)
        engines.append(e)
        monkeypatch.setattr(_device, "resolve", lambda device: device)
        monkeypatch.setattr(_device, "engine", lambda device: e)
        return e

    return make


def device_epochs(spec, **kw):
    out = []
    with loader(spec, device="late", **kw) as l:
        for _ in range(EPOCHS):
            for b in l:
                out.append(b)
    return out


def same(dev, host):
    return (np.array_equal(dev["npy"].numpy(), host["npy"])
            and np.array_equal(dev["cls"].numpy(), host["cls"])
            and np.array_equal(dev.valid.numpy(), host["valid"]))


@needs_torch
@pytest.mark.parametrize("polls", [0, 3, 1 << 30])
def test_device_batches_equal_host_batches(shards, late, polls):
    want = host_epochs(shards)
    eng = late(polls)
    got = device_epochs(shards)
    assert len(got) == len(want) == EPOCHS * 10
    for ev in eng.events:
        assert ev.copied  # close() waited for every copy
    for d, h in zip(got, want):
        assert isinstance(d, wds.DeviceBatch)
        assert same(d, h), (d.epoch, d.index)
        assert d["txt"] == h["txt"] and d[2] == h["txt"]  # bytes: on the host
        assert d.sample_keys == h["keys"] and (d.epoch, d.index) == (h["epoch"], h["index"])
        assert d.torch()["__valid__"] is d.valid
        assert set(d.torch()) == {"npy", "cls", "txt", "__valid__"}
        assert d.rows == 4 and d.names == ["npy", "cls", "txt"] == list(d)
    if polls == 1 << 30:
        # Copies that never complete by polling: the loader waited for the
        # oldest whenever it needed its slot.
        assert eng.waits > 0


@needs_torch
def test_an_early_release_would_mix_batches(shards, late):
    """The control: a slot given back at once is refilled before its late
    copy reads it (the check above would fail without the fences)."""
    want = host_epochs(shards)
    eng = late(early=True)
    got = []
    with loader(shards, device="late") as l:
        for _ in range(EPOCHS):
            for b in l:
                got.append(b)
                # Copies of earlier batches from this batch's slot run now,
                # late: they read this batch (delivered, not being filled).
                slot = eng.events[-1].parts[0][0]
                for ev in eng.events[:-1]:
                    if not ev.copied and ev.parts[0][0] == slot:
                        ev.complete()
        for ev in eng.events:
            ev.complete()
    differ = sum(not same(d, h) for d, h in zip(got, want))
    assert differ > 0, "an early release went unnoticed"


@needs_torch
def test_batch_to_holds_the_slot_until_the_copy(shards, late):
    want = host_epochs(shards)
    eng = late(polls=2)
    got = []
    with loader(shards) as l:
        for _ in range(EPOCHS):
            for b in l:
                got.append(b.to("late", non_blocking=True))
                b.release()  # at once: the copy still holds the slot
        assert not all(ev.copied for ev in eng.events)
    assert all(ev.copied for ev in eng.events)
    assert all(same(d, h) for d, h in zip(got, want))
    # non_blocking=False: the copy is over when to() returns.
    with loader(shards) as l:
        b = l.next()
        d = b.to("late")
        assert eng.events[-1].copied and same(d, want[0])


@needs_torch
def test_state_dict_and_resume_with_device(shards, late):
    late(polls=1)
    want = host_epochs(shards)
    with loader(shards, device="late") as l:
        for _ in range(3):
            l.next()
        st = l.state_dict()
    with loader(shards, device="late") as l:
        l.load_state_dict(st)
        rest = [l.next() for _ in range(7)]
    assert all(same(d, h) for d, h in zip(rest, want[3:10]))


@needs_torch
def test_device_argument_errors():
    with pytest.raises(ValueError, match="CUDA devices only"):
        _device.resolve("cpu")
    with pytest.raises(ValueError, match="not a device"):
        _device.resolve("gpu:0")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="no CUDA GPU"):
            _device.resolve("cuda")
    else:
        n = torch.cuda.device_count()
        with pytest.raises(ValueError, match=f"has {n} GPU"):
            _device.resolve(f"cuda:{n}")


# ---- on a GPU -----------------------------------------------------------

def slow_engine(monkeypatch, early=False):
    """The real engine with a long kernel queued on its stream before every
    copy (about 2 ms), so that copies run long after next() returned."""
    base = _device.engine(_device.resolve("cuda"))

    class Slow:
        device = base.device
        stream = base.stream

        def copy(self, host):
            with torch.cuda.stream(base.stream):
                torch.cuda._sleep(4_000_000)
            return base.copy(host)

        def done(self, ev):
            return True if early else base.done(ev)

        def wait(self, ev):
            base.wait(ev)

        def synchronize(self):
            base.synchronize()

    s = Slow()
    monkeypatch.setattr(_device, "engine", lambda device: s)
    return s


@needs_torch
@pytest.mark.gpu
@pytest.mark.skipif(torch is None or not torch.cuda.is_available(),
                    reason="no CUDA GPU (or no PyTorch)")
def test_gpu_copies_behind_long_kernels_are_intact(shards, monkeypatch):
    want = host_epochs(shards)
    slow_engine(monkeypatch)
    got = []
    with loader(shards, device="cuda", prefetch=4) as l:
        for _ in range(EPOCHS):
            for b in l:  # kept on the GPU: several copies in flight
                assert b.valid.is_cuda and b["npy"].device.type == "cuda"
                got.append(b)
        torch.cuda.synchronize()
    for d, h in zip(got, want):
        assert np.array_equal(d["npy"].cpu().numpy(), h["npy"])
        assert np.array_equal(d["cls"].cpu().numpy(), h["cls"])
        assert np.array_equal(d.valid.cpu().numpy(), h["valid"])
    # The control: released at once, copies behind the kernel read refilled
    # slots (read the tensors only after everything ran).
    slow_engine(monkeypatch, early=True)
    got = []
    with loader(shards, device="cuda") as l:
        for _ in range(EPOCHS):
            got.extend(l)
        torch.cuda.synchronize()
    differ = sum(not np.array_equal(d["npy"].cpu().numpy(), h["npy"])
                 for d, h in zip(got, want))
    assert differ > 0, "an early release went unnoticed on the GPU"


@needs_torch
@pytest.mark.gpu
@pytest.mark.skipif(torch is None or not torch.cuda.is_available(),
                    reason="no CUDA GPU (or no PyTorch)")
def test_gpu_batch_to_non_blocking(shards, monkeypatch):
    want = host_epochs(shards)
    slow_engine(monkeypatch)
    got = []
    with loader(shards) as l:
        for _ in range(EPOCHS):
            for b in l:
                got.append(b.to("cuda", non_blocking=True))
                del b
    for d, h in zip(got, want):
        assert np.array_equal(d["npy"].cpu().numpy(), h["npy"])


@needs_torch
def test_train_ddp_refuses_more_processes_than_gpus():
    """examples/train_ddp.py says what to do instead of torch's "invalid
    device ordinal" (its check, called as it is on a GPU machine)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
    spec = importlib.util.spec_from_file_location("train_ddp", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.gpu_for(1, 2, 2) == torch.device("cuda", 1)
    with pytest.raises(SystemExit, match=r"4 processes on this node but 2 GPUs.*"
                       r"--nproc-per-node 2"):
        mod.gpu_for(3, 4, 2)
    with pytest.raises(SystemExit, match="but 1 GPU "):
        mod.gpu_for(0, 2, 1)


@needs_torch
def test_fences_from_two_threads_lose_nothing(shards, late):
    """Batch.to from a second thread while the loader's thread polls: every
    entry is waited for (none dropped from the queue) and the copies equal
    the host batches."""
    import threading

    want = host_epochs(shards)
    eng = late(polls=1)
    got, errors = [], []
    with loader(shards, prefetch=4) as l:
        batches = [l.next() for _ in range(3)]

        def copy(b):
            try:
                got.append((b.index, b.to("late", non_blocking=True)))
                b.release()
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=copy, args=(b,)) for b in batches]
        for t in ts:
            t.start()
        for _ in range(20):
            l._fences.poll()
        for t in ts:
            t.join()
    assert not errors, errors
    assert all(ev.copied for ev in eng.events)
    for i, d in got:
        assert same(d, want[i])


@needs_torch
def test_a_failed_copy_waits_before_the_slot_goes(shards, late):
    """A copy that fails after earlier work was queued: the engine is
    synchronised before the batch (and its slot) can go."""
    eng = late(polls=1 << 30)
    calls = []

    def bad_copy(host, made=None):
        calls.append("copy")
        raise RuntimeError("CUDA out of memory (stand-in)")

    eng.copy = bad_copy
    sync = eng.synchronize
    eng.synchronize = lambda: (calls.append("sync"), sync())
    with loader(shards, device="late") as l:
        with pytest.raises(RuntimeError, match="out of memory"):
            l.next()
    assert calls == ["copy", "sync"]


def test_device_without_torch_says_what_to_do(shards, monkeypatch):
    """device= without PyTorch: an ImportError that says to install it or
    use the numpy batches (torch hidden from the import where installed)."""
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch fails
    with pytest.raises(ImportError, match=r"device= needs PyTorch \(pip install torch\)"):
        wds.Loader(shards, FIELDS, 4, device="cuda")
    with wds.Loader(shards, FIELDS, 4) as l:
        b = l.next()
        with pytest.raises(ImportError, match="device= needs PyTorch"):
            b.to("cuda")
        b.release()

@needs_torch
def test_close_when_a_fence_raises(shards, late):
    """A fence whose wait() raises (a CUDA error): close()
    still closes the C loader, raises the first error once, and a second
    close() (or the `with` exit after it) is a no-op, the engine not asked
    again."""
    eng = late(polls=1 << 30)
    calls = []

    def bad_wait(ev):
        calls.append("wait")
        raise RuntimeError("CUDA error: illegal address")

    eng.wait = bad_wait
    l = loader(shards, device="late", prefetch=4)  # next() waits for none
    b = l.next()
    b2 = l.next()
    assert b is not None and b2 is not None
    with pytest.raises(RuntimeError, match="illegal address"):
        l.close()
    assert l.closed
    assert calls == ["wait", "wait"]  # both fences tried, the first raised
    l.close()  # no-op
    assert calls == ["wait", "wait"]
    del b, b2

    # done() raising in next(): the error is next()'s; close() then
    # closes (its wait() works).
    eng = late(polls=1 << 30)

    def bad_done(ev):
        raise RuntimeError("CUDA error: launch failure (done)")

    eng.done = bad_done
    l = loader(shards, device="late")
    b = l.next()
    with pytest.raises(RuntimeError, match="launch failure"):
        l.next()
    l.close()
    assert l.closed
    del b

    # `with`: the error leaves the block once; the loader is closed.
    eng = late(polls=1 << 30)

    def bad_wait2(ev):
        raise RuntimeError("CUDA error: illegal address (with)")

    eng.wait = bad_wait2
    with pytest.raises(RuntimeError, match=r"illegal address \(with\)"):
        with loader(shards, device="late") as l:
            assert l.next() is not None
    assert l.closed
    l.close()


@needs_torch
def test_close_interrupted_waits_before_the_slot_goes(shards, late,
                                                     monkeypatch):
    """A KeyboardInterrupt in a fence's wait() is not the copy's failure:
    the copy may still be reading the slot, so close() synchronises the
    engine before the slot is released and the C loader closed, then
    raises the interrupt once (it gave the slot up at once)."""
    eng = late(polls=1 << 30)
    freed = []
    free = _device.Fences._free

    def spy(entry):
        freed.append(entry[1].copied)  # had the copy run when it went?
        free(entry)

    monkeypatch.setattr(_device.Fences, "_free", staticmethod(spy))
    wait = eng.wait
    interrupts = [1]

    def interrupted_wait(ev):
        if interrupts:
            interrupts.pop()
            raise KeyboardInterrupt
        wait(ev)

    eng.wait = interrupted_wait
    l = loader(shards, device="late", prefetch=4)
    b, b2 = l.next(), l.next()
    assert b is not None and b2 is not None
    with pytest.raises(KeyboardInterrupt):
        l.close()
    assert l.closed
    assert freed == [True, True], "a slot went while its copy could run"
    l.close()  # no-op
    del b, b2


def test_one_engine_per_device_from_two_threads(monkeypatch):
    """Two loaders opened at once on one device (two threads) get one
    engine, so one GPU JPEG decoder (its calls serialised by its own lock):
    engine() makes it under a lock."""
    import threading
    import time

    made = []

    class SlowEngine:
        def __init__(self, device):
            time.sleep(0.05)  # a window two unlocked calls would share
            made.append(device)

    monkeypatch.setattr(_device, "_TorchCuda", SlowEngine)
    monkeypatch.setattr(_device, "_engines", {})
    got = []
    ts = [threading.Thread(target=lambda: got.append(_device.engine("cuda:7")))
          for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert made == ["cuda:7"]
    assert len(got) == 4 and all(e is got[0] for e in got)
