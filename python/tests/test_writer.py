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
