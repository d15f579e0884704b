"""wds.Dataset: a torch IterableDataset for DataLoader workers (exactness and
equal steps per rank, decoding, resume through StatefulDataLoader, pickling)."""
import collections
import multiprocessing
import pickle

import numpy as np
import pytest

import wds

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

N_SAMPLES = 203  # 7 shards of 29: no split of it is even


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from PIL import Image

    d = tmp_path_factory.mktemp("dataset")
    rng = np.random.default_rng(0)
    with wds.ShardWriter(str(d / "s-%03d.tar"), maxcount=29) as w:
        for i in range(N_SAMPLES):
            h, wd = 20 + i % 7, 30 + i % 5  # images of several sizes
            img = Image.fromarray(rng.integers(0, 255, (h, wd, 3), np.uint8))
            buf = __import__("io").BytesIO()
            img.save(buf, format="PNG")
            w.write({"__key__": f"k{i:04d}", "png": buf.getvalue(),
                     "cls": i % 10, "txt": f"caption {i} é",
                     "json": {"i": i, "tags": ["a"] * (i % 3)},
                     "npy": np.arange(i % 4 + 1, dtype=np.float32),
                     "bin": bytes([i % 256]) * 3})
    spec = str(d / "s-{000..006}.tar")
    ix = str(d / "index.json")
    import subprocess
    import os

    subprocess.run([os.environ["WDS_TEST_CLI"], "index", "-o", ix, spec],
                   check=True, capture_output=True)
    return spec, ix


def keys_of(batches):
    return [k for b in batches for k in b["__key__"]]


def test_sample_types(shards):
    spec, ix = shards
    with pytest.raises(ValueError, match="share a name"):
        wds.Dataset(spec, "png,png:rgb:16", index=ix)
    ds = wds.Dataset(spec, "png,cls,txt,json,npy,bin", index=ix)
    samples = list(ds)
    assert len(samples) == N_SAMPLES
    s = samples[0]
    i = int(s["__key__"][1:])
    assert s["__url__"].endswith(".tar") and s["__valid__"] is True
    assert isinstance(s["png"], np.ndarray) and s["png"].dtype == np.uint8
    assert s["png"].shape == (20 + i % 7, 30 + i % 5, 3)  # its own size
    assert s["cls"] == i % 10 and isinstance(s["cls"], int)
    assert s["txt"] == f"caption {i} é"
    assert s["json"] == {"i": i, "tags": ["a"] * (i % 3)}
    assert s["npy"].shape == (i % 4 + 1,)  # ragged .npy
    assert s["bin"] == bytes([i % 256]) * 3
    resized = list(wds.Dataset(spec, "png:rgb:16,cls", index=ix))
    assert all(r["png"].shape == (16, 16, 3) for r in resized)
    pil = next(iter(wds.Dataset(spec, "png", index=ix, image="pil")))
    assert pil["png"].size[::-1] == (20 + int(pil["__key__"][1:]) % 7,
                                     30 + int(pil["__key__"][1:]) % 5)


def test_in_dataset_batching_ragged(shards):
    spec, ix = shards
    ds = wds.Dataset(spec, "png:rgb:16,cls,txt,npy", index=ix)
    b = next(iter(ds.batched(8)))
    assert tuple(b["png"].shape) == (8, 16, 16, 3)
    assert isinstance(b["cls"], torch.Tensor) and b["cls"].shape == (8,)
    assert isinstance(b["txt"], list) and len(b["txt"]) == 8
    assert isinstance(b["npy"], list)  # ragged kept as a list
    p = next(iter(ds.batched(8, ragged="pad")))
    assert p["npy"].shape == (8, 4)
    c = next(iter(ds.batched(5, collation_fn=lambda rows: len(rows))))
    assert c == 5
    n = list(ds.batched(50, partial=False, collation_fn=len))
    assert n == [50] * (N_SAMPLES // 50)


def run_rank(spec, ix, rank, world, nw, batch_size=8, epoch=0, **kw):
    ds = wds.Dataset(spec, "cls,txt", index=ix if ix else None, rank=rank, world_size=world,
                     shuffle_buffer=20, seed=5, **kw)
    ds.set_epoch(epoch)
    dl = DataLoader(ds, batch_size=batch_size, num_workers=nw,
                    multiprocessing_context="fork" if nw else None)
    return [dict(b) for b in dl]


@pytest.mark.parametrize("nw", [0, 2, 3])
@pytest.mark.parametrize("world", [1, 2, 3])
def test_exact_every_key_once_equal_steps(shards, nw, world):
    spec, ix = shards
    per_rank = [run_rank(spec, ix, r, world, nw) for r in range(world)]
    steps = {len(b) for b in per_rank}
    assert len(steps) == 1, f"ranks take {[len(b) for b in per_rank]} steps"
    keys = [k for b in per_rank for k in keys_of(b)]
    c = collections.Counter(keys)
    assert set(c) == {f"k{i:04d}" for i in range(N_SAMPLES)}
    vw = world * max(nw, 1)
    padded = -N_SAMPLES % vw
    assert len(keys) == N_SAMPLES + padded
    assert sum(v - 1 for v in c.values()) == padded  # repeats: the padding
    # The padding is marked: the valid rows are every key once, the invalid
    # ones repeats carrying their sample's data.
    rows = [(k, bool(v), t) for rb in per_rank for b in rb
            for k, v, t in zip(b["__key__"], b["__valid__"], b["txt"])]
    valid = [k for k, v, _ in rows if v]
    assert sorted(valid) == [f"k{i:04d}" for i in range(N_SAMPLES)]
    pad = [(k, t) for k, v, t in rows if not v]
    assert len(pad) == padded
    assert all(t == f"caption {int(k[1:])} é" for k, t in pad)


def test_drop_last_has_no_repeats(shards):
    spec, ix = shards
    per_rank = [run_rank(spec, ix, r, 2, 3, drop_last=True) for r in range(2)]
    keys = [k for b in per_rank for k in keys_of(b)]
    assert len(keys) == len(set(keys)) == N_SAMPLES - N_SAMPLES % 6


def test_epochs_differ_and_repeat(shards):
    spec, ix = shards
    a = keys_of(run_rank(spec, ix, 0, 1, 2, epoch=0))
    b = keys_of(run_rank(spec, ix, 0, 1, 2, epoch=1))
    assert a != b and set(a) == set(b)  # (the padding repeat may differ)
    assert a == keys_of(run_rank(spec, ix, 0, 1, 2, epoch=0))


def test_resampled_per_rank(shards):
    spec, ix = shards
    for nw in (0, 3):
        b = run_rank(spec, None, 1, 2, nw, mode="resampled",
                     samples_per_epoch=50)
        assert sum(len(x["__key__"]) for x in b) == 50


def test_transforms_run_in_workers(shards):
    spec, ix = shards
    import os

    main = os.getpid()
    ds = wds.Dataset(spec, "cls", index=ix).map(
        lambda s: dict(s, pid=os.getpid()))
    pids = {int(p) for b in DataLoader(ds, batch_size=16, num_workers=2,
                                       multiprocessing_context="fork")
            for p in b["pid"]}
    assert len(pids) == 2 and main not in pids


def _tag(s):
    s["cls2"] = s["cls"] * 2
    return s


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_pickled_workers(shards, method):
    spec, ix = shards
    ds = wds.Dataset(spec, "cls", index=ix).map(_tag)
    pickle.loads(pickle.dumps(ds))
    dl = DataLoader(ds, batch_size=16, num_workers=2,
                    multiprocessing_context=multiprocessing.get_context(method))
    rows = [(k, int(c), int(c2)) for b in dl
            for k, c, c2 in zip(b["__key__"], b["cls"], b["cls2"])]
    assert len(rows) == N_SAMPLES + 1  # 2 workers: one padding repeat
    assert {k for k, _, _ in rows} == {f"k{i:04d}" for i in range(N_SAMPLES)}
    assert all(c2 == 2 * c for _, c, c2 in rows)


def test_no_thread_before_fork(shards):
    import threading

    spec, ix = shards
    before = threading.active_count()
    ds = wds.Dataset(spec, "cls", index=ix)
    assert threading.active_count() == before
    assert ds.__dict__.keys()  # nothing opened


try:
    from torchdata import stateful_dataloader as stateful
except ImportError:  # the tests below skip, visibly
    stateful = None
needs_torchdata = pytest.mark.skipif(stateful is None,
                                     reason="torchdata is not installed")


def stateful_run(spec, ix, nw, stop=None, state=None, epochs=(0, 1),
                 reset_loader_state=False):
    ds = wds.Dataset(spec, "cls", index=ix, shuffle_buffer=20, seed=2,
                     rank=0, world_size=1)
    if state is not None and reset_loader_state:
        ds.load_state_dict(state)  # another num_workers: on the dataset
    dl = stateful.StatefulDataLoader(
        ds, batch_size=8, num_workers=nw,
        multiprocessing_context="fork" if nw else None)
    if state is not None and not reset_loader_state:
        dl.load_state_dict(state)
    out, n = [], 0
    first = state["epoch_hint"] if state and "epoch_hint" in state else None
    for e in epochs:
        if first is not None and e < first:
            continue
        ds.set_epoch(e)
        for b in dl:
            out.append(list(b["__key__"]))
            n += 1
            if stop is not None and n == stop:
                return out, dl.state_dict()
    return out, None


@needs_torchdata
@pytest.mark.parametrize("nw", [0, 2])
def test_stateful_resume_same_workers(shards, nw):
    spec, ix = shards
    full, _ = stateful_run(spec, ix, nw, epochs=(0,))
    part, st = stateful_run(spec, ix, nw, stop=9, epochs=(0,))
    rest, _ = stateful_run(spec, ix, nw, state=st, epochs=(0,))
    assert part == full[:9]
    assert part + rest == full


@needs_torchdata
@pytest.mark.parametrize("before,after", [(2, 3), (3, 0), (0, 2), (3, 2)])
def test_resume_other_num_workers_keeps_the_epoch_exact(shards, before, after):
    spec, ix = shards
    part, st = stateful_run(spec, ix, before, stop=7, epochs=(0,))
    rest, _ = stateful_run(spec, ix, after, state=st, epochs=(0,),
                           reset_loader_state=True)
    keys = [k for b in part + rest for k in b]
    padded = -N_SAMPLES % max(before, 1)
    assert len(keys) == N_SAMPLES + padded
    assert set(keys) == {f"k{i:04d}" for i in range(N_SAMPLES)}


def test_webdataset_verbs_keep_every_sample(shards):
    spec, ix = shards
    ds = (wds.Dataset(spec, "png:rgb:16,cls,txt", index=ix)
          .rename(image="png", label="cls")
          .map_dict(label=lambda c: c + 100)
          .to_tuple("image", "label", "__key__")
          .map_tuple(lambda im: im.mean(), None))
    rows = list(ds)
    assert len(rows) == N_SAMPLES
    assert all(isinstance(m, float) and 100 <= c < 110 for m, c, _ in rows)
    assert {k for _, _, k in rows} == {f"k{i:04d}" for i in range(N_SAMPLES)}
    again = list(ds.batched(10).unbatched())
    assert [k for _, _, k in again] == [k for _, _, k in rows]


@needs_torchdata
def test_resume_twice_across_worker_counts(shards):
    """Stopped with 3 workers, resumed with 2 and stopped again, resumed
    with 2: every sample of the epoch still once."""
    spec, ix = shards
    part, st = stateful_run(spec, ix, 3, stop=4, epochs=(0,))
    ds = wds.Dataset(spec, "cls", index=ix, shuffle_buffer=20, seed=2,
                     rank=0, world_size=1)
    ds.load_state_dict(st)
    dl = stateful.StatefulDataLoader(ds, batch_size=8, num_workers=2,
                                     multiprocessing_context="fork")
    mid = []
    for b in dl:
        mid.append(list(b["__key__"]))
        if len(mid) == 5:
            break
    st2 = dl.state_dict()
    rest, _ = stateful_run(spec, ix, 2, state=st2, epochs=(0,))
    keys = [k for b in part + mid + rest for k in b]
    assert len(keys) == N_SAMPLES + (-N_SAMPLES % 3)
    assert set(keys) == {f"k{i:04d}" for i in range(N_SAMPLES)}


def test_rank_world_from_the_environment(shards, monkeypatch):
    spec, ix = shards
    for r_name, w_name in (("RANK", "WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        keys = []
        for rank in range(2):
            monkeypatch.setenv(r_name, str(rank))
            monkeypatch.setenv(w_name, "2")
            keys += [s["__key__"] for s in wds.Dataset(spec, "cls", index=ix)]
            monkeypatch.delenv(r_name)
            monkeypatch.delenv(w_name)
        assert len(keys) == N_SAMPLES + 1 and len(set(keys)) == N_SAMPLES


def _read_per_rank(spec, world, n, **kw):
    """n samples of each of world ranks (no DataLoader), and each rank's
    state after them."""
    out = []
    for r in range(world):
        ds = wds.Dataset(spec, "cls", rank=r, world_size=world, **kw)
        it = iter(ds)
        keys = [next(it)["__key__"] for _ in range(n)]
        out.append((keys, ds.state_dict()))
    return out


def test_resume_into_another_world_size_is_refused(shards):
    """The review's repro: a state of world 2 (100 samples per rank) loaded
    into world 3 ranks was continued silently (200 samples missing, 102
    repeated); it is refused naming both world sizes."""
    spec, _ = shards
    saved = _read_per_rank(spec, 2, 100, shuffle_buffer=10)
    for r in range(3):
        ds = wds.Dataset(spec, "cls", rank=r, world_size=3, shuffle_buffer=10)
        with pytest.raises(ValueError, match=r"world_size 2.* has 3"):
            ds.load_state_dict(saved[r % 2][1])
    # The same world still resumes: every sample of the epoch once (plus
    # the padding).
    keys = []
    for r, (part, st) in enumerate(saved):
        ds = wds.Dataset(spec, "cls", rank=r, world_size=2, shuffle_buffer=10)
        ds.load_state_dict(st)
        keys += part + [s["__key__"] for s in ds]
    assert len(keys) == N_SAMPLES + 1
    assert set(keys) == {f"k{i:04d}" for i in range(N_SAMPLES)}


@pytest.mark.parametrize("key,saved,now", [
    ("drop_last", {"drop_last": False}, {"drop_last": True}),
    ("shuffle_buffer", {"shuffle_buffer": 10}, {"shuffle_buffer": 20}),
    ("shuffle_buffer", {}, {"shuffle_buffer": 20}),
    ("samples_per_epoch", {"mode": "resampled", "samples_per_epoch": 60},
     {"mode": "resampled", "samples_per_epoch": 80}),
    ("chunk", {"chunk": 32}, {"chunk": 8}),
])
def test_resume_with_other_options_is_refused(shards, key, saved, now):
    spec, _ = shards
    st = _read_per_rank(spec, 1, 5, **saved)[0][1]
    ds = wds.Dataset(spec, "cls", rank=0, world_size=1, **now)
    with pytest.raises(ValueError, match=f"saved with {key} "):
        ds.load_state_dict(st)


def test_resume_on_other_data_is_refused(shards):
    spec, ix = shards
    st = _read_per_rank(spec, 1, 5)[0][1]
    for other in ({"spec": spec.replace("006", "005")}, {"index": ix}):
        ds = wds.Dataset(other.get("spec", spec), "cls", rank=0,
                         world_size=1, index=other.get("index"))
        with pytest.raises(ValueError, match="spec/index fingerprint"):
            ds.load_state_dict(st)


@pytest.mark.parametrize("env,expected", [
    ({"SLURM_NTASKS": "4"}, (0, 1)),
    ({"PMI_RANK": "1", "PMI_SIZE": "2"}, (1, 2)),
    ({"PMIX_RANK": "1"}, "PMIX_RANK='1'"),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, "OMPI_COMM_WORLD_RANK is not"),
    ({"RANK": "1"}, "WORLD_SIZE is not set"),
    ({"SLURM_PROCID": "1", "SLURM_NTASKS": "3"}, (1, 3)),
])
def test_rank_world_follow_the_c_rule(shards, monkeypatch, env, expected):
    """Dataset's rank/world from the environment are the C loader's
    (base/topology.c), as wds.Loader gets them: a lone SLURM_NTASKS (a
    batch script's) is world 1, a lone OMPI_COMM_WORLD_SIZE (a size
    without this process's rank) and a lone PMIX_RANK are refused with the
    C message, PMI is read."""
    spec, ix = shards
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                 "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                 "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                 "PMI_RANK", "PMI_SIZE", "PMIX_RANK"):
        monkeypatch.delenv(name, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ds = wds.Dataset(spec, "cls", index=ix)
    if isinstance(expected, str):
        with pytest.raises(wds.Error, match=expected) as got:
            ds._rank_world()
        with pytest.raises(wds.Error, match=expected) as ld:
            wds.Loader(spec, "cls", 4, index=ix).close()
        assert str(got.value) in str(ld.value) or \
            str(ld.value) in str(got.value)
        return
    assert ds._rank_world() == expected
    with wds.Loader(spec, "cls", 1, index=ix, mode="exact") as ld:
        assert ld.state_dict()["world_size"] == expected[1]
        loader_keys = [k for b in ld for k in b.sample_keys]
    keys = [s["__key__"] for s in ds]
    assert len(keys) == -(-N_SAMPLES // expected[1])
    assert sorted(keys) == sorted(loader_keys)  # the same rank's samples
