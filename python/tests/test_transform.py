"""wds.Loader(..., transform=fn): fn on each decoded sample in a pool of
worker processes fed through shared memory (exactness, resume, errors, a
worker killed, start methods, no leaked processes or /dev/shm segments)."""
import io
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import wds

sys.path.insert(0, os.path.dirname(__file__))
import transform_fns as tf  # noqa: E402

N = 60  # 3 shards of 20


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    from PIL import Image

    d = tmp_path_factory.mktemp("transform")
    rng = np.random.default_rng(0)
    with wds.ShardWriter(str(d / "s-%03d.tar"), maxcount=20) as w:
        for i in range(N):
            h, wd = 12 + i % 3, 10 + i % 4  # own sizes vary
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (h, wd, 3), np.uint8)).save(
                buf, format="PNG")
            w.write({"__key__": f"k{i:04d}", "png": buf.getvalue(),
                     "cls": i % 10, "txt": "x" * (i % 5)})
    return str(d / "s-{000..002}.tar")


FIELDS = "png:rgb:8,cls,txt"


def shm_mine():
    return sorted(n for n in os.listdir("/dev/shm")
                  if n.startswith(f"wds_tx{os.getpid()}_"))


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone too
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run(loader):
    """[(keys, {field: copy}, valid copy)] of one epoch."""
    out = []
    for b in loader:
        out.append((list(b.sample_keys), {n: np.array(b[n]) for n in b},
                    np.array(b.valid)))
        b.release()
    return out


def same(a, b):
    assert [x[0] for x in a] == [x[0] for x in b]
    for (_, fa, va), (_, fb, vb) in zip(a, b):
        assert np.array_equal(va, vb)
        assert fa.keys() == fb.keys()
        for n in fa:
            assert fa[n].dtype == fb[n].dtype and np.array_equal(fa[n], fb[n])


def test_exact_ranks_same_samples_and_order(spec):
    """Two ranks: every key once, equal steps, the rows of the plain loader
    in its order, padding rows invalid and zero; the results do not depend
    on the number of workers (per-sample seeding)."""
    per_rank = []
    for rank in (0, 1):
        kw = dict(rank=rank, world_size=2, workers=1, seed=5)
        with wds.Loader(spec, FIELDS, 7, **kw) as plain:
            ref = run(plain)
        with wds.Loader(spec, FIELDS, 7, transform=tf.augment,
                        transform_workers=0, **kw) as local:
            here = run(local)
        with wds.Loader(spec, FIELDS, 7, transform=tf.augment,
                        transform_workers=2, **kw) as pool:
            assert len(pool) == len(ref)
            got = run(pool)
        same(here, got)
        assert [x[0] for x in got] == [x[0] for x in ref]
        for (keys, f, valid), (_, pf, pvalid) in zip(got, ref):
            assert np.array_equal(valid, pvalid)
            assert f["img"].shape == (len(keys), 3, 8, 8)
            assert f["img"].dtype == np.float32
            assert np.array_equal(f["cls"][valid], pf["cls"][valid])
            assert not f["img"][~valid].any()  # padding rows zero
        per_rank.append(got)
    steps = [len(r) for r in per_rank]
    assert steps[0] == steps[1]
    keys = [k for r in per_rank for keys, _, v in r
            for k, ok in zip(keys, v) if ok]
    assert sorted(keys) == [f"k{i:04d}" for i in range(N)]


def test_invalid_rows_stay_invalid(tmp_path):
    """A row the C loader marks invalid (a sample it could not decode,
    on_error="skip") is not given to fn, stays invalid and is zero; the
    last, partial batch keeps its rows."""
    from PIL import Image

    with wds.ShardWriter(str(tmp_path / "c-%03d.tar"), maxcount=20) as w:
        for i in range(10):
            buf = io.BytesIO()
            Image.fromarray(np.full((9, 9, 3), i, np.uint8)).save(
                buf, format="PNG")
            w.write({"__key__": f"k{i:04d}", "cls": i, "txt": "t",
                     "png": buf.getvalue() if i != 7 else b"not a png"})
    spec = str(tmp_path / "c-000.tar")
    with wds.Loader(spec, FIELDS, 4, on_error="skip", workers=1) as ld:
        ref = run(ld)
    # fails_on_k7 would raise on k0007: it is never called on it
    with wds.Loader(spec, FIELDS, 4, on_error="skip", workers=1,
                    transform=tf.fails_on_k7, transform_workers=2) as ld:
        got = run(ld)
        assert ld.stats()["transform_skipped"] == 0
    assert [g[0] for g in got] == [r[0] for r in ref]
    assert [len(g[0]) for g in got] == [4, 4, 2]
    for (_, f, valid), (_, _, rvalid) in zip(got, ref):
        assert np.array_equal(valid, rvalid)
        assert not f["img"][~valid].any() and not f["cls"][~valid].any()
    assert got[1][2].tolist() == [True, True, True, False]


def test_image_at_own_size_and_tuple_result(spec):
    """"png" without a size is decoded in the worker (wds.Dataset's form);
    a tuple gives fields "0", "1"."""
    with wds.Loader(spec, "png,cls", 10, transform=tf.raw_size,
                    transform_workers=1, workers=1) as ld:
        b = next(iter(ld))
        assert list(b) == ["0", "1"] and b[0].shape == (10, 8, 8, 3)
        assert b["1"].tolist() == [int(k[1:]) % 10 for k in b.sample_keys]


def test_resume_mid_epoch(spec):
    """state_dict with batches in flight gives the position of those
    yielded; a new loader resumes the uninterrupted run's batches."""
    kw = dict(workers=1, seed=3, shuffle_buffer=10, transform=tf.augment,
              transform_workers=2)
    with wds.Loader(spec, FIELDS, 8, **kw) as ld:
        full = run(ld)
    with wds.Loader(spec, FIELDS, 8, **kw) as ld:
        it = iter(ld)
        head = [next(it) for _ in range(3)]
        assert ld._tx.in_flight() > 0  # the pool is ahead
        st = ld.state_dict()
        assert (st["epoch"], st["batches"]) == (0, 3)
        del head
    with wds.Loader(spec, FIELDS, 8, **kw) as ld:
        ld.load_state_dict(st)
        rest = run(ld)
    same(rest, full[3:])
    with wds.Loader(spec, FIELDS, 8, **kw) as ld:  # and in the same loader
        it = iter(ld)
        next(it)
        ld.load_state_dict(st)
        same(run(ld), full[3:])
        # set_epoch with batches in flight: they are dropped
        next(iter(ld))
        ld.set_epoch(1)
        assert "epoch=1 batches=0" in repr(ld)
        e1 = run(ld)
    with wds.Loader(spec, FIELDS, 8, epoch=1, **kw) as ld:
        same(e1, run(ld))
    assert [x[0] for x in e1] != [x[0] for x in full]  # another order


def test_fn_raising_names_the_sample(spec):
    with wds.Loader(spec, FIELDS, 8, transform=tf.fails_on_k7,
                    transform_workers=2, workers=1) as ld:
        with pytest.raises(wds.TransformError, match="k0007") as e:
            run(ld)
        assert e.value.key == "k0007" and e.value.url.endswith(".tar")
        assert "ZeroDivisionError: bad sample k0007" in str(e.value)
        assert "fails_on_k7" in e.value.worker_traceback
        assert isinstance(e.value.__cause__, ZeroDivisionError)
        with pytest.raises(wds.TransformError, match="earlier error"):
            ld.next()
        pids = [p.pid for p in ld._tx.workers]
    assert not any(alive(p) for p in pids)
    assert pickle.loads(pickle.dumps(e.value)).key == "k0007"
    # in the consumer's thread too
    with wds.Loader(spec, FIELDS, 8, transform=tf.fails_on_k7,
                    transform_workers=0, workers=1) as ld:
        with pytest.raises(wds.TransformError, match="k0007"):
            run(ld)


def test_fn_raising_skipped(spec):
    with wds.Loader(spec, FIELDS, 8, transform=tf.fails_on_k7,
                    transform_workers=2, workers=1, on_error="skip") as ld:
        got = run(ld)
        assert ld.stats()["transform_skipped"] == 1
    rows = {k: (v, f["img"][i]) for keys, f, valid in got
            for i, (k, v) in enumerate(zip(keys, valid))}
    assert rows["k0007"][0] == False and not rows["k0007"][1].any()  # noqa
    assert sum(v for v, _ in rows.values()) == N - 1


def test_shape_mismatch_names_field_key_and_shapes(spec):
    with wds.Loader(spec, FIELDS, 8, transform=tf.shape_of_k5,
                    transform_workers=1, workers=1) as ld:
        with pytest.raises(wds.TransformError) as e:
            run(ld)
    msg = str(e.value)
    assert "'img'" in msg and "k0005" in msg
    assert "(3, 4, 8)" in msg and "(3, 8, 8)" in msg
    # declared fields: the first sample is checked against them
    with wds.Loader(spec, FIELDS, 8, transform=tf.augment,
                    transform_workers=1, workers=1,
                    transform_fields={"img": ((3, 8, 9), "float32"),
                                      "cls": ((), "int64"),
                                      "n": ((), "int32")}) as ld:
        with pytest.raises(wds.TransformError, match=r"\(3, 8, 9\)"):
            ld.next()


def test_worker_killed_is_an_error_not_a_hang(spec):
    before = shm_mine()
    t = time.monotonic()
    with wds.Loader(spec, FIELDS, 8, transform=tf.dies_on_k9,
                    transform_workers=2, workers=1) as ld:
        pids = [p.pid for p in ld._tx.workers]
        with pytest.raises(wds.TransformError, match="died.*SIGKILL"):
            run(ld)
    assert time.monotonic() - t < 60
    assert not any(alive(p) for p in pids)
    assert shm_mine() == before == []
    # killed from outside between batches: the next batch says so
    with wds.Loader(spec, FIELDS, 8, transform=tf.augment,
                    transform_workers=2, workers=1) as ld:
        it = iter(ld)
        next(it)
        victim = ld._tx.workers[1].pid
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(wds.TransformError,
                           match=f"worker 1 \\(pid {victim}\\) died"):
            for _ in range(10):
                next(it)
    assert shm_mine() == []
    # killed while nothing is in flight (between epochs): the next batch's
    # hand-over finds its pipe broken, and says which worker died
    with wds.Loader(spec, FIELDS, 8, transform=tf.augment,
                    transform_workers=2, workers=1) as ld:
        run(ld)
        w = ld._tx.workers[0]
        os.kill(w.pid, signal.SIGKILL)
        w.join(30)
        with pytest.raises(wds.TransformError, match="worker 0 .*SIGKILL"):
            ld.next()
    assert shm_mine() == []


def test_timeout_stops_the_pool(spec):
    with wds.Loader(spec, FIELDS, 8, transform=tf.sleeps_on_k3,
                    transform_workers=1, workers=1,
                    transform_timeout=1.0) as ld:
        pids = [p.pid for p in ld._tx.workers]
        t = time.monotonic()
        with pytest.raises(TimeoutError, match="transform_timeout"):
            run(ld)  # k0003's batch: wherever the shard order puts it
        assert time.monotonic() - t < 120  # k0003 sleeps 300 s
    assert not any(alive(p) for p in pids) and shm_mine() == []


def test_start_methods_and_pickling(spec):
    ref = None
    for method in ("spawn", "forkserver"):
        with wds.Loader(spec, FIELDS, 8, transform=tf.augment,
                        transform_workers=1, workers=1,
                        transform_start_method=method) as ld:
            assert ld._tx.start_method == method
            got = run(ld)
        if ref is not None:
            same(got, ref)
        ref = got
    with pytest.raises(TypeError, match="cannot be pickled"):
        wds.Loader(spec, FIELDS, 8, transform=lambda s: s,
                   transform_start_method="spawn")
    with pytest.raises(ValueError, match="transform_start_method"):
        wds.Loader(spec, FIELDS, 8, transform=tf.augment,
                   transform_start_method="thread")
    # fork: refused while another thread runs, as a forked child would
    # inherit its locks
    stop = threading.Event()
    th = threading.Thread(target=stop.wait)
    th.start()
    try:
        with pytest.raises(ValueError, match="fork.*threads"):
            wds.Loader(spec, FIELDS, 8, transform=tf.augment,
                       transform_start_method="fork")
    finally:
        stop.set()
        th.join()
    assert shm_mine() == []


def test_fork_in_a_fresh_process(spec):
    """fork works before any thread exists (the pool starts before the C
    loader's threads), a local function included. numpy's OpenBLAS starts
    a thread pool of its own at import: one thread keeps it away."""
    code = textwrap.dedent(f"""
        import numpy as np, wds
        def local(s):
            return {{"x": s["png"].sum(axis=2), "cls": s["cls"]}}
        ld = wds.Loader({spec!r}, "png:rgb:8,cls", 8, transform=local,
                        transform_workers=2, transform_start_method="fork",
                        workers=1)
        rows = sum(int(b.valid.sum()) for b in ld)
        ld.close()
        print(rows)
    """)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(N)]


def test_ctrl_c_leaves_no_process_or_segment(spec):
    """SIGINT while the pool works: the script ends, its workers with it,
    and no /dev/shm segment of it is left."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import wds, transform_fns as tf
        ld = wds.Loader({spec!r}, "png:rgb:8,cls,txt", 4, transform=tf.slow,
                        transform_workers=2, workers=1)
        it = iter(ld)
        next(it)
        print(*[p.pid for p in ld._tx.workers], flush=True)
        for b in it:
            pass
        while True:
            for b in ld:
                pass
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    pids = [int(x) for x in p.stdout.readline().split()]
    assert len(pids) == 2
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert "KeyboardInterrupt" in err
    for _ in range(50):
        if not any(alive(q) for q in pids):
            break
        time.sleep(0.1)
    assert not any(alive(q) for q in pids)
    assert [n for n in os.listdir("/dev/shm")
            if n.startswith(f"wds_tx{p.pid}_")] == []


def test_held_arrays_keep_their_block(spec):
    """An array taken from a batch stays valid after release(); the block
    is reused only once no array views it."""
    with wds.Loader(spec, FIELDS, 8, transform=tf.augment,
                    transform_workers=1, workers=1) as ld:
        it = iter(ld)
        b = next(it)
        img = b["img"]
        keep = img.copy()
        b.release()
        for b2 in it:
            b2.release()
        assert np.array_equal(img, keep)
    assert shm_mine() == []


def test_bad_arguments(spec):
    with pytest.raises(TypeError, match="callable"):
        wds.Loader(spec, FIELDS, 8, transform=3)
    with pytest.raises(ValueError, match="transform_workers"):
        wds.Loader(spec, FIELDS, 8, transform=tf.augment,
                   transform_workers=-1)
    with pytest.raises(ValueError, match="transform_timeout"):
        wds.Loader(spec, FIELDS, 8, transform=tf.augment,
                   transform_timeout=0)
    with pytest.raises(ValueError, match="go with transform"):
        wds.Loader(spec, FIELDS, 8, image="pil")
    # a bad C option: the pool started first is stopped again
    with pytest.raises(ValueError):
        wds.Loader(spec, FIELDS, 8, transform=tf.augment, prefetch=-3)
    assert shm_mine() == []


@pytest.mark.gpu
def test_device_copies_the_transformed_block(spec):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    kw = dict(workers=1, seed=2, transform=tf.augment, transform_workers=2)
    with wds.Loader(spec, FIELDS, 8, **kw) as ld:
        want = run(ld)
    got = []
    with wds.Loader(spec, FIELDS, 8, device="cuda", **kw) as ld:
        for b in ld:
            assert b["img"].device.type == "cuda" and b.valid.is_cuda
            got.append((b["img"].cpu().numpy(), b.valid.cpu().numpy()))
        assert all(blk.pinned for blk in ld._tx._all
                   if blk in ld._tx._free_out)  # page-locked output blocks
    assert len(got) == len(want)
    for (img, valid), (_, f, v) in zip(got, want):
        assert np.array_equal(img, f["img"]) and np.array_equal(valid, v)
