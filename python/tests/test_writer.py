"""wds.ShardWriter: written shards read back by wds.Reader, by `wds ls`
(WDS_TEST_CLI) and by Python webdataset."""
import glob
import io
import json
import os
import subprocess

import numpy as np
import pytest

import wds

CLI = os.environ.get("WDS_TEST_CLI", "")


def samples(n):
    for i in range(n):
        yield {
            "__key__": f"sample{i:05d}",
            "__url__": "ignored",  # keys starting with "_" are not written
            "txt": f"caption {i} é",
            "cls": i % 7,
            "score": i / 4,
            "json": {"i": i, "tags": ["a", "b"]},
            "lst.json": [i, i + 1],
            "npy": np.arange(i + 3, dtype=np.float32).reshape(1, -1),
            "bin": bytes([i % 256]) * (100 + i),
        }


def check_sample(got, i):
    assert got["__key__"] == f"sample{i:05d}"
    assert got["txt"] == f"caption {i} é".encode()
    assert got["cls"] == str(i % 7).encode()
    assert float(got["score"]) == i / 4
    assert json.loads(got["json"]) == {"i": i, "tags": ["a", "b"]}
    assert json.loads(got["lst.json"]) == [i, i + 1]
    arr = np.load(io.BytesIO(got["npy"]))
    assert arr.dtype == np.float32 and arr.shape == (1, i + 3)
    assert (arr.ravel() == np.arange(i + 3)).all()
    assert got["bin"] == bytes([i % 256]) * (100 + i)


@pytest.mark.parametrize("suffix,compress", [
    (".tar", None), (".tar.gz", None), (".tar.zst", None), (".tar", "gz")])
def test_write_read_back(tmp_path, suffix, compress):
    pattern = str(tmp_path / f"out-%03d{suffix}")
    with wds.ShardWriter(pattern, maxcount=10, compress=compress) as w:
        for s in samples(25):
            w.write(s)
    st = w.stats() if not w.closed else None
    assert st is None and w.closed
    paths = sorted(glob.glob(str(tmp_path / "out-*")))
    assert [os.path.basename(p) for p in paths] == [
        f"out-{i:03d}{suffix}" for i in range(3)]
    got = list(wds.Reader(str(tmp_path / f"out-{{000..002}}{suffix}")))
    assert len(got) == 25
    for i, g in enumerate(got):
        check_sample(g, i)
        assert g["__url__"] == paths[i // 10]
    if compress == "gz":  # gzip whatever the name says
        with open(paths[0], "rb") as f:
            assert f.read(2) == b"\x1f\x8b"


def test_read_by_webdataset_and_cli(tmp_path):
    webdataset = pytest.importorskip("webdataset")
    pattern = str(tmp_path / "s-%06d.tar")
    with wds.ShardWriter(pattern, maxcount=4) as w:
        for s in samples(9):
            w.write(s)
    paths = sorted(glob.glob(str(tmp_path / "s-*.tar")))
    assert len(paths) == 3
    got = list(webdataset.WebDataset(paths, shardshuffle=False))
    assert len(got) == 9
    for i, g in enumerate(got):
        check_sample(g, i)
    if CLI:
        out = subprocess.run([CLI, "ls", "--json", *paths], capture_output=True,
                             check=True).stdout.decode().splitlines()
        listed = [json.loads(line) for line in out]
        assert [s["__key__"] for s in listed] == [f"sample{i:05d}" for i in range(9)]
        assert sorted(listed[0]["fields"]) == sorted(
            ["txt", "cls", "score", "json", "lst.json", "npy", "bin"])


def test_round_trip_reader_samples(tmp_path):
    """wds.Reader's samples written back as they are give the same shard."""
    src = str(tmp_path / "a-%03d.tar")
    with wds.ShardWriter(src) as w:
        for s in samples(5):
            w.write(s)
    first = list(wds.Reader(str(tmp_path / "a-000.tar")))
    with wds.ShardWriter(str(tmp_path / "b-%03d.tar")) as w:
        for s in first:
            w.write(s)
    with open(tmp_path / "a-000.tar", "rb") as a, open(tmp_path / "b-000.tar", "rb") as b:
        assert a.read() == b.read()  # deterministic output


def test_maxsize_and_stats(tmp_path):
    w = wds.ShardWriter(str(tmp_path / "m-%d.tar"), maxsize=20000, sync=False)
    for i in range(10):
        w.write({"__key__": f"k{i}", "bin": b"x" * 5000})
    st = w.stats()
    assert st["samples"] == 10 and st["shards"] >= 2
    final = w.close()
    assert final["shards"] == len(glob.glob(str(tmp_path / "m-*.tar")))
    assert w.close() is None
    for p in glob.glob(str(tmp_path / "m-*.tar")):
        assert os.path.getsize(p) <= 20000
    with pytest.raises(ValueError):
        w.write({"__key__": "late", "bin": b""})


def test_writer_errors(tmp_path):
    w = wds.ShardWriter(str(tmp_path / "e-%d.tar"))
    with pytest.raises(ValueError):
        w.write({"bin": b"no key"})
    with pytest.raises(TypeError):
        w.write({"__key__": "k", "obj": object()})
    with pytest.raises(wds.InvalidError) as e:
        w.write({"__key__": "bad.key", "bin": b"x"})
    assert "bad.key" in str(e.value)
    w.abort()
    assert w.closed
    with pytest.raises(ValueError):
        wds.ShardWriter(str(tmp_path / "x-%d.tar"), compress="bz2")
    with pytest.raises(wds.Error):
        with wds.ShardWriter(str(tmp_path / "no-such-dir" / "x-%d.tar")) as w:
            w.write({"__key__": "k", "bin": b"x"})
    assert not os.path.exists(tmp_path / "no-such-dir")


def test_exception_in_block_keeps_written_samples(tmp_path):
    with pytest.raises(RuntimeError):
        with wds.ShardWriter(str(tmp_path / "p-%d.tar")) as w:
            w.write({"__key__": "k0", "bin": b"x"})
            raise RuntimeError("stop")
    assert [s["__key__"] for s in wds.Reader(str(tmp_path / "p-0.tar"))] == ["k0"]


# ---- encoding by extension, as webdataset's writer ----------------------

def by_extension_sample():
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (12, 16, 3), dtype=np.uint8)
    gray = rng.integers(0, 256, (9, 7), dtype=np.uint8)
    arr = np.arange(12, dtype=np.float32).reshape(3, 4)
    return {
        "__key__": "k0",
        "jpg": rgb, "jpeg": rgb, "img": rgb, "png": gray, "ppm": rgb,
        "float.png": gray.astype(np.float64) / 255.0,
        "tiff": rgb,
        "pyd": {"a": [1, 2], "b": (3, 4)}, "pickle": ("x", 1.5),
        "npy": arr, "npz": {"a": arr, "b": np.arange(3)},
        "json": {"i": 1, "s": "é"}, "lst.json": [1, 2, 3],
        "txt": "caption é", "cls": 7, "index": 12,
        "ten": [arr, np.arange(5, dtype=np.int64)],
        "mp": {"a": [1, 2], "b": "c"},
        "bin": b"\x00\x01raw",
    }


def write_one(path, sample, **kw):
    with wds.ShardWriter(path, sync=False, **kw) as w:
        w.write(sample)
    return {s: v for s, v in next(iter(wds.Reader(path))).items()
            if not s.startswith("__")}


def test_encodes_by_extension_as_webdataset(tmp_path):
    """Every field's bytes are what webdataset's TarWriter (encoder=True)
    writes for the same sample."""
    webdataset = pytest.importorskip("webdataset")
    pytest.importorskip("PIL")
    pytest.importorskip("msgpack")
    sample = by_extension_sample()
    ours = write_one(str(tmp_path / "ours.tar"), sample)
    theirs_path = str(tmp_path / "theirs.tar")
    with webdataset.TarWriter(theirs_path, encoder=True, mtime=0) as tw:
        tw.write(dict(sample))
    theirs = {s: v for s, v in
              next(iter(webdataset.WebDataset(theirs_path,
                                              shardshuffle=False))).items()
              if not s.startswith("__")}
    assert sorted(ours) == sorted(theirs)
    for ext in ours:
        assert ours[ext] == theirs[ext], ext


def test_by_extension_decodes(tmp_path):
    """The written members decode to the values (without webdataset)."""
    import gzip
    import pickle

    PIL = pytest.importorskip("PIL.Image")
    sample = by_extension_sample()
    sample.pop("mp")
    sample.update({"txt.gz": "zipped é", "npy.gz": sample["npy"],
                   "pgm": sample["png"], "score": 0.25,
                   "other": np.arange(3, dtype=np.int16), "flag.cls": True})
    got = write_one(str(tmp_path / "d.tar"), sample)
    for ext in ("jpg", "jpeg", "img", "png", "ppm", "pgm", "tiff", "float.png"):
        img = PIL.open(io.BytesIO(got[ext]))
        want = {"jpg": "JPEG", "jpeg": "JPEG", "img": "JPEG", "png": "PNG",
                "ppm": "PPM",
                "pgm": "PPM", "tiff": "TIFF", "float.png": "PNG"}[ext]
        assert img.format == want, ext
        assert img.size == sample[ext].shape[1::-1], ext
    assert (np.asarray(PIL.open(io.BytesIO(got["png"]))) == sample["png"]).all()
    assert (np.asarray(PIL.open(io.BytesIO(got["ppm"]))) == sample["ppm"]).all()
    assert got["pgm"].startswith(b"P5")
    assert pickle.loads(got["pyd"]) == sample["pyd"]
    assert pickle.loads(got["pickle"]) == sample["pickle"]
    assert (np.load(io.BytesIO(got["npy"])) == sample["npy"]).all()
    z = np.load(io.BytesIO(got["npz"]))
    assert (z["a"] == sample["npz"]["a"]).all() and (z["b"] == np.arange(3)).all()
    assert gzip.decompress(got["txt.gz"]) == "zipped é".encode()
    assert (np.load(io.BytesIO(gzip.decompress(got["npy.gz"])))
            == sample["npy"]).all()
    assert got["txt"] == "caption é".encode()
    assert got["cls"] == b"7" and got["index"] == b"12"
    assert got["flag.cls"] == b"True"  # str() for the class extensions
    assert got["bin"] == b"\x00\x01raw"
    # Where the extension says nothing: by type.
    assert got["score"] == b"0.25"
    assert (np.load(io.BytesIO(got["other"])) == np.arange(3)).all()
    # tenbin: "~TenBin~" chunks, 64-byte padded.
    assert got["ten"].startswith(b"~TenBin~") and len(got["ten"]) % 64 == 0
    with pytest.raises(ValueError):  # a float image is in [0, 1]
        write_one(str(tmp_path / "bad.tar"),
                  {"__key__": "k", "png": np.full((2, 2), 3.0)})


# ---- pipe: targets ------------------------------------------------------

def test_pipe_target_runs_per_shard(tmp_path):
    """"pipe:CMD" runs CMD % shard with the tar on its stdin, as webdataset
    does; the shards are the bytes a file pattern gives."""
    files = str(tmp_path / "f-%03d.tar")
    piped = f"pipe:cat > {tmp_path}/p-%03d.tar"
    for pattern in (files, piped):
        with wds.ShardWriter(pattern, maxcount=4, sync=False) as w:
            for s in samples(10):
                w.write(s)
            st = w.stats()
        assert st["samples"] == 10
    assert w.stats()["shards"] == 3
    for i in range(3):
        with open(tmp_path / f"f-{i:03d}.tar", "rb") as a, \
                open(tmp_path / f"p-{i:03d}.tar", "rb") as b:
            assert a.read() == b.read()
    got = list(wds.Reader(str(tmp_path / "p-{000..002}.tar")))
    for i, g in enumerate(got):
        check_sample(g, i)
    # maxsize splits as for files.
    for pattern in (str(tmp_path / "fs-%d.tar"), f"pipe:cat > {tmp_path}/ps-%d.tar"):
        with wds.ShardWriter(pattern, maxsize=20000, sync=False) as w:
            for i in range(10):
                w.write({"__key__": f"k{i}", "bin": b"x" * 5000})
    fs = sorted(glob.glob(str(tmp_path / "fs-*.tar")))
    ps = sorted(glob.glob(str(tmp_path / "ps-*.tar")))
    assert len(fs) == len(ps) >= 2
    for a, b in zip(fs, ps):
        assert open(a, "rb").read() == open(b, "rb").read()
    # Compression from the command's end, as webdataset's tarmode.
    with wds.ShardWriter(f"pipe:cat > {tmp_path}/z-%d.tar.gz") as w:
        w.write({"__key__": "k", "txt": "x"})
    with open(tmp_path / "z-0.tar.gz", "rb") as f:
        assert f.read(2) == b"\x1f\x8b"
    assert next(iter(wds.Reader(str(tmp_path / "z-0.tar.gz"))))["txt"] == b"x"


def test_pipe_target_failures(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = wds.ShardWriter("pipe:cat > /dev/null; exit 3")
    w.write({"__key__": "k", "txt": "x"})
    with pytest.raises(wds.CommandError) as e:
        w.close()
    assert isinstance(e.value, OSError)
    assert "exit status 3" in str(e.value) and "pipe:cat" in str(e.value)
    # One command without a shard number takes one shard only.
    w = wds.ShardWriter("pipe:cat > one.tar", maxcount=1)
    w.write({"__key__": "a", "txt": "x"})
    with pytest.raises(wds.InvalidError):
        w.write({"__key__": "b", "txt": "y"})
    w.close()
    assert [s["__key__"] for s in wds.Reader("one.tar")] == ["a"]
    # Looks like a pipe: but is not one: refused, no file made.
    for target in (" pipe:cat > x-%d.tar", "PIPE:cat > x-%d.tar",
                   "Pipe:cat > x-%d.tar"):
        with pytest.raises(wds.InvalidError) as e:
            wds.ShardWriter(target)
        assert isinstance(e.value, ValueError)
    # The C writer under it refuses a pipe: pattern too.
    with pytest.raises(wds.InvalidError) as e:
        wds._wds._Writer("pipe:cat > y-%d.tar")
    assert "a pipe: target is a command" in str(e.value)
    assert sorted(os.listdir(tmp_path)) == ["one.tar"]


def test_one_writer_per_pattern_and_leftovers(tmp_path):
    """A second ShardWriter of a pattern another one is writing fails
    (OpenError naming the lock and the pid) and writes nothing; a run with
    fewer shards than the last warns of the last one's later shards."""
    pat = str(tmp_path / "w-%03d.tar")
    first = wds.ShardWriter(pat, maxcount=1, sync=False)
    first.write({"__key__": "a", "txt": "1"})
    second = wds.ShardWriter(str(tmp_path / "w-%05d.tar"), maxcount=1,
                             sync=False)
    with pytest.raises(wds.OpenError) as e:
        second.write({"__key__": "b", "txt": "2"})
    assert f"(pid {os.getpid()})" in str(e.value)
    assert ".w-%d.tar.lock" in str(e.value)
    second.abort()
    for k in range(4):
        first.write({"__key__": f"k{k}", "txt": str(k)})
    first.close()
    assert sorted(os.listdir(tmp_path)) == [f"w-{i:03d}.tar" for i in range(5)]
    with pytest.warns(UserWarning, match=r"3 shards, .*w-002.tar to .*w-004.tar"):
        with wds.ShardWriter(pat, maxcount=1, sync=False) as w:
            w.write({"__key__": "x", "txt": "x"})
            w.write({"__key__": "y", "txt": "y"})
    assert len(os.listdir(tmp_path)) == 5  # nothing deleted
