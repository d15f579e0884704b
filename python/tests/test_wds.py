"""The Python package wds: expand, Reader, Index and the errors.

Run by python/tests/run.sh (ctest python_tree and python_pip). The samples
are compared with `wds ls --json` (WDS_TEST_CLI), with Python webdataset's raw
samples, and with the expected listings of the third-party shards
(WDS_TEST_SHARED/webdataset/expected; skipped without ../shared).
"""
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile
import threading
import time

import pytest

import wds

CLI = os.environ.get("WDS_TEST_CLI", "")
SHARED = os.environ.get("WDS_TEST_SHARED", "")


def cli(*args, check=True):
    if not CLI or not os.access(CLI, os.X_OK):
        pytest.skip("WDS_TEST_CLI (the wds command) not given")
    p = subprocess.run([CLI, *args], capture_output=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"wds {args}: {p.returncode} {p.stderr.decode()}")
    return p


def make_shard(path, samples, fmt=tarfile.USTAR_FORMAT):
    """samples: list of (key, {ext: bytes}). Written in order, fields sorted."""
    with tarfile.open(path, "w", format=fmt) as tf:
        for key, fields in samples:
            for ext in sorted(fields):
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(fields[ext])
                info.mtime = 0
                tf.addfile(info, io.BytesIO(fields[ext]))
    return str(path)


def sample_set(shard, n, size=100):
    return [
        (f"s{shard}/k{i:04d}",
         {"txt": f"text {shard} {i}".encode(),
          "bin": bytes((i * 7 + j) % 256 for j in range(size + i)),
          "cls": str(i % 10).encode()})
        for i in range(n)
    ]


@pytest.fixture
def shards(tmp_path):
    """Three shards of 5, 7 and 3 samples; returns (spec, paths, samples)."""
    paths, everything = [], []
    for s, n in enumerate((5, 7, 3)):
        samples = sample_set(s, n)
        paths.append(make_shard(tmp_path / f"d-{s:03d}.tar", samples))
        everything.append(samples)
    return str(tmp_path / "d-{000..002}.tar"), paths, everything


# ---- the package --------------------------------------------------------

def test_version_and_mode():
    assert re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", wds.__version__)
    mode = os.environ.get("WDS_TEST_MODE")
    if mode == "pip":
        from importlib.metadata import version
        assert version("wds") == wds.__version__
        assert "site-packages" in wds.__file__, wds.__file__
    elif mode == "tree":
        assert os.environ["PYTHONPATH"] in wds.__file__, wds.__file__


def test_extension_exports_only_its_init():
    # The extension's files share wds_py_* names (python/wds/_common.h);
    # hidden, as the static library's are: only PyInit__wds is exported.
    import shutil
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("nm not found (binutils)")
    p = subprocess.run([nm, "-D", "--defined-only", wds._wds.__file__],
                       capture_output=True, text=True, check=True)
    names = sorted(line.split()[-1].split("@")[0]
                   for line in p.stdout.splitlines() if len(line.split()) >= 3)
    # The linker's markers and a sanitizer's instrumentation aside.
    names = [n for n in names if not n.startswith("__")
             and n not in ("_init", "_fini", "_edata", "_end")]
    assert names == ["PyInit__wds"]


def test_error_classes():
    names = ["NoMemoryError", "InvalidError", "SpecError", "LimitError", "IOError",
             "OpenError", "CommandError", "TruncatedError", "CorruptError",
             "FormatError", "DecompressError", "DuplicateError", "TimeoutError",
             "CancelledError"]
    codes = set()
    for i, name in enumerate(names):
        cls = getattr(wds, name)
        assert issubclass(cls, wds.Error) and issubclass(cls, Exception)
        assert cls.status == -(i + 1)
        assert cls.status_name.startswith("WDS_ERR_")
        codes.add(cls.status)
    assert len(codes) == len(names)
    assert issubclass(wds.TimeoutError, TimeoutError)
    assert issubclass(wds.NoMemoryError, MemoryError)
    assert issubclass(wds.SpecError, ValueError)


def test_error_builtin_bases():
    """Each class is also the builtin a Python caller catches."""
    bases = {
        "NoMemoryError": MemoryError, "InvalidError": ValueError,
        "SpecError": ValueError, "LimitError": ValueError,
        "IOError": OSError, "OpenError": OSError, "CommandError": OSError,
        "TruncatedError": EOFError, "CorruptError": ValueError,
        "FormatError": ValueError, "DecompressError": ValueError,
        "DuplicateError": ValueError, "TimeoutError": TimeoutError,
        "NotFoundError": FileNotFoundError,
        "PermissionDeniedError": PermissionError,
        "IsDirectoryError": IsADirectoryError,
    }
    for name, builtin in bases.items():
        cls = getattr(wds, name)
        assert issubclass(cls, wds.Error) and issubclass(cls, builtin), name
        assert name in wds.__all__
    for name in ("NotFoundError", "PermissionDeniedError", "IsDirectoryError"):
        assert issubclass(getattr(wds, name), wds.OpenError)
        assert getattr(wds, name).status_name == "WDS_ERR_OPEN"
    # wds.CancelledError is a wds.Error only: asyncio's derives from
    # BaseException, which `except Exception` would not catch.
    assert not issubclass(wds.CancelledError, (OSError, ValueError))


def test_missing_file_is_file_not_found(tmp_path):
    import errno

    missing = str(tmp_path / "missing.tar")
    for make in (lambda: next(iter(wds.Reader(missing))),
                 lambda: wds.Index(missing),
                 lambda: next(iter(wds.Loader(missing, "cls", 1, mode="plain",
                                              workers=1)))):
        with pytest.raises(FileNotFoundError) as e:
            make()
        assert isinstance(e.value, wds.OpenError)
        assert isinstance(e.value, wds.NotFoundError)
        assert e.value.errno == errno.ENOENT
        assert e.value.status_name == "WDS_ERR_OPEN"
        assert missing in str(e.value)
        assert not str(e.value).startswith("[Errno")
    with pytest.raises(IsADirectoryError) as e:
        next(iter(wds.Reader(str(tmp_path))))
    assert isinstance(e.value, wds.OpenError) and e.value.errno == errno.EISDIR
    if os.geteuid() != 0:  # root opens a file of mode 000
        locked = tmp_path / "locked.tar"
        locked.write_bytes(b"")
        locked.chmod(0)
        with pytest.raises(PermissionError) as e:
            next(iter(wds.Reader(str(locked))))
        assert isinstance(e.value, wds.OpenError)
    # Other open failures stay a plain wds.OpenError (still an OSError).
    with pytest.raises(wds.OpenError) as e:
        next(iter(wds.Reader("ftp://h/x.tar")))
    assert isinstance(e.value, OSError)
    assert not isinstance(e.value, FileNotFoundError)


def test_messages_name_python_keywords(tmp_path, shards):
    """Messages raised in Python name the keyword, not the command's flag
    or the C function."""
    spec, paths, _ = shards
    cases = [
        (lambda: wds.Loader(None, "cls", 2, mode="plain",
                            sources=[wds.Source(paths[0]),
                                     wds.Source(paths[1])]),
         'mode="exact" or "resampled"'),
        (lambda: wds.Loader("-", "cls", 2, mode="exact"),
         'mode="plain" or "resampled"'),
        (lambda: wds.Loader(paths[0], "cls", 2, mode="plain", rank=0,
                            world_size=2),
         'mode="resampled" or "exact"'),
    ]
    for make, keyword in cases:
        with pytest.raises(wds.InvalidError) as e:
            make()
        msg = str(e.value)
        assert isinstance(e.value, ValueError)
        assert keyword in msg, msg
        assert "--" not in msg and "wds_loader_open" not in msg, msg
    # The read timeout and the zstd window: the keywords that raise them.
    with pytest.raises(wds.TimeoutError) as e:
        list(wds.Reader("pipe:sleep 5", read_timeout_ms=200))
    assert "raise it with read_timeout_ms)" in str(e.value), str(e.value)
    assert "--" not in str(e.value)
    big = tmp_path / "big.tar.zst"
    with open(paths[0], "rb") as src, open(big, "wb") as dst:  # from a pipe: no
        subprocess.run(["zstd", "-q", "--long=27", "-c"], stdin=src,  # content
                       stdout=dst, check=True)  # size, so the whole window
    with pytest.raises(wds.LimitError) as e:
        list(wds.Reader(str(big), max_window_bytes=1 << 20))
    assert "raise the limit with max_window_bytes" in str(e.value), str(e.value)
    assert "--max-window" not in str(e.value) and "C API" not in str(e.value)
    # The C function's name is dropped from the start of a message.
    with pytest.raises(wds.InvalidError) as e:
        wds.Loader(None, "cls", 2, sources=[])
    assert not re.search(r"\bwds_[a-z_]+:", str(e.value)), str(e.value)


# ---- expand -------------------------------------------------------------

@pytest.mark.parametrize("spec", [
    "a-{000..003}.tar",
    "a-{0..10..3}.tar::b-{x,y}.tar",
    "pipe:curl -s http://h/d-{0..2}.tar",
    "{a..c}{1,2}",
])
def test_expand_matches_cli(spec):
    want = cli("expand", spec).stdout.decode().splitlines()
    assert wds.expand(spec) == want


def test_expand_matches_braceexpand():
    from braceexpand import braceexpand
    for spec in ["x-{000..012}.tar", "{a,b{1..3}}-{9..7}", "d{0..20..5}"]:
        assert wds.expand(spec) == list(braceexpand(spec))


def test_expand_file_and_env(tmp_path, monkeypatch):
    lst = tmp_path / "list.txt"
    lst.write_text("# comment\n\na-{0..1}.tar\nb.tar\n")
    assert wds.expand(f"@{lst}") == ["a-0.tar", "a-1.tar", "b.tar"]
    monkeypatch.setenv("WDS_ROOT", "/data")
    assert wds.expand("${ROOT}/s-{0..1}.tar") == ["/data/s-0.tar", "/data/s-1.tar"]


def test_pipe_from_files_refused_unless_allowed(tmp_path, shards):
    """A pipe: command read from an @FILE or an index is not run unless
    allow_pipe_from_files; typed in the spec it runs."""
    spec, paths, everything = shards
    marker = tmp_path / "ran"
    cmd = f"pipe:touch {marker} && cat {paths[1]}"
    lst = tmp_path / "list.txt"
    lst.write_text(f"{paths[0]}\n{cmd}\n")
    want = f'{lst} line 2: "{cmd}" is a pipe: command read from a file'
    with pytest.raises(wds.SpecError) as e:
        wds.expand(f"@{lst}")
    assert want in str(e.value) and "(allow_pipe_from_files=True)" in str(e.value)
    assert wds.expand(f"@{lst}", allow_pipe_from_files=True) == [paths[0], cmd]
    with pytest.raises(wds.SpecError) as e:
        wds.Reader(f"@{lst}")
    assert want in str(e.value)
    assert not marker.exists()
    with wds.Reader(f"@{lst}", allow_pipe_from_files=True) as r:
        assert len(list(r)) == 5 + 7
    assert marker.exists()
    marker.unlink()
    assert len(list(wds.Reader(f"{paths[0]}::{cmd}"))) == 5 + 7  # typed
    assert marker.exists()
    # an index naming a pipe: command
    ix = tmp_path / "ix.json"
    ix.write_text(json.dumps({"shardlist": [
        {"url": paths[0], "nsamples": 5}, {"url": cmd, "nsamples": 7}]}))
    with pytest.raises(wds.FormatError) as e:
        wds.Index(ix)
    assert f'{ix}: shardlist entry 2: "{cmd}" is a pipe: command' in str(e.value)
    assert wds.Index(ix, allow_pipe_from_files=True).sizes == [5, 7]


def test_expand_errors():
    with pytest.raises(wds.SpecError) as e:
        wds.expand("a-{0..2.tar")
    p = cli("expand", "a-{0..2.tar", check=False)
    assert p.returncode != 0
    assert str(e.value) and str(e.value) in p.stderr.decode()
    assert e.value.status == wds.SpecError.status
    with pytest.raises(wds.LimitError):
        wds.expand("{0..99}", max_urls=10)
    with pytest.raises(wds.OpenError):
        wds.expand("@/nonexistent/list.txt")
    with pytest.raises(TypeError):
        wds.expand(3)


# ---- Reader -------------------------------------------------------------

def test_reader_samples(shards):
    spec, paths, everything = shards
    with wds.Reader(spec) as r:
        assert r.shards == paths
        got = list(r)
        st = r.stats()
    want = [dict({"__key__": k, "__url__": paths[s]}, **f)
            for s, samples in enumerate(everything) for k, f in samples]
    assert got == want
    assert st["shards"] == 3 and st["samples"] == 15
    assert r.closed


def test_reader_matches_cli_json(shards):
    spec, _, _ = shards
    lines = cli("ls", "--json", spec).stdout.decode().splitlines()
    want = [json.loads(line) for line in lines]
    got = list(wds.Reader(spec))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g["__key__"] == w["__key__"] and g["__url__"] == w["__url__"]
        fields = {k: v for k, v in g.items() if not k.startswith("__")}
        assert sorted(fields) == sorted(w["fields"])
        for ext, data in fields.items():
            assert len(data) == w["fields"][ext]["size"]
            assert hashlib.sha256(data).hexdigest() == w["fields"][ext]["sha256"]


def test_reader_matches_webdataset(shards):
    webdataset = pytest.importorskip("webdataset")
    spec, paths, _ = shards
    ds = webdataset.WebDataset(paths, shardshuffle=False)
    want = [{k: v for k, v in s.items() if k != "__local_path__"} for s in ds]
    got = list(wds.Reader(paths))  # a list of URLs, taken as is
    assert got == want


def test_reader_shared_expected():
    if not SHARED or not os.path.isdir(os.path.join(SHARED, "webdataset", "expected")):
        pytest.skip("../shared/testdata/webdataset not present")
    base = os.path.join(SHARED, "webdataset")
    names = sorted(f[:-len(".jsonl")] for f in os.listdir(os.path.join(base, "expected"))
                   if f.endswith(".jsonl"))
    assert names
    for name in names:
        with open(os.path.join(base, "expected", name + ".jsonl")) as f:
            want = [json.loads(line) for line in f if line.strip()]
        url = os.path.join(base, name)
        got = list(wds.Reader(url))
        assert [g["__key__"] for g in got] == [w["key"] for w in want], name
        for g, w in zip(got, want):
            assert g["__url__"] == url
            fields = {k: v for k, v in g.items() if not k.startswith("__")}
            assert sorted(fields) == sorted(w["fields"]), (name, g["__key__"])
            for ext, data in fields.items():
                assert len(data) == w["fields"][ext]["size"]
                assert hashlib.sha256(data).hexdigest() == w["fields"][ext]["sha256"]


def test_reader_compressed_and_pipe(tmp_path, shards):
    _, paths, everything = shards
    import gzip
    gz = tmp_path / "c.tar.gz"
    with open(paths[1], "rb") as f, gzip.open(gz, "wb") as g:
        g.write(f.read())
    got = list(wds.Reader(str(gz)))
    assert [s["__key__"] for s in got] == [k for k, _ in everything[1]]
    got = list(wds.Reader(f"pipe:cat {paths[2]}"))
    assert [s["bin"] for s in got] == [f["bin"] for _, f in everything[2]]


def test_reader_errors_carry_messages(tmp_path, shards):
    _, paths, everything = shards
    missing = str(tmp_path / "missing.tar")
    with pytest.raises(wds.OpenError) as e:
        next(iter(wds.Reader(missing)))
    assert missing in str(e.value)
    p = cli("ls", missing, check=False)
    assert p.returncode != 0 and str(e.value) in p.stderr.decode()

    # A truncated shard: the error names it; iterating again continues with
    # the next shard, as the C reader does.
    data = open(paths[0], "rb").read()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[:1536 + 100])
    r = wds.Reader([str(cut), paths[2]])
    seen, errors = [], []
    while True:
        try:
            s = next(r)
        except StopIteration:
            break
        except wds.Error as exc:
            errors.append(exc)
            continue
        seen.append(s["__key__"])
    assert len(errors) == 1 and isinstance(errors[0], wds.TruncatedError)
    assert str(cut) in str(errors[0])
    assert errors[0].status_name == "WDS_ERR_TRUNCATED"
    assert seen[-3:] == [k for k, _ in everything[2]]

    garbage = tmp_path / "garbage.tar"
    garbage.write_bytes(b"this is not a tar file at all\n" * 100)
    with pytest.raises(wds.Error) as e:
        list(wds.Reader(str(garbage)))
    p = cli("ls", str(garbage), check=False)
    assert p.returncode != 0 and str(e.value) in p.stderr.decode()


def test_reader_options(shards):
    _, paths, _ = shards
    with pytest.raises(wds.LimitError) as e:
        list(wds.Reader(paths[0], max_sample_bytes=64))
    assert "k0000" in str(e.value)
    assert len(list(wds.Reader(paths[0], buffer_size_bytes=4096, max_fields=3,
                               read_timeout_ms=0, max_window_bytes=1 << 20))) == 5
    with pytest.raises(wds.SpecError):
        wds.Reader("d-{0..2.tar")
    with pytest.raises(ValueError):
        wds.Reader(paths[0], max_fields=-1)
    with pytest.raises(TypeError):
        wds.Reader(paths[0], no_such_option=1)
    with pytest.raises(TypeError):
        wds.Reader(paths[0], 5)  # options are keyword-only


def test_reader_keywords_are_the_option_tables(shards):
    """The Reader's keywords that are loader options are converted and
    checked by the same rows of the library's option table as wds.Loader's
    (the reader commands' flags too): the same bounds and messages, and a
    float where a count is wanted is an error, not rounded."""
    _, paths, _ = shards
    for kw, value, says in (
            ("retries", 2000, 'retries needs a count from 0 to 1000, not "2000"'),
            ("read_timeout_ms", 1.5, "read_timeout_ms needs a whole number, not float (1.5)"),
            ("max_window_bytes", "x", "max_window_bytes needs a whole number, not str"),
            ("cache_dir", "", 'cache_dir needs a directory, not ""')):
        msgs = []
        for make in (lambda: wds.Reader(paths[0], **{kw: value}),
                     lambda: wds.Loader(paths[0], "cls", 1, **{kw: value})):
            with pytest.raises(ValueError) as e:
                make()
            msgs.append(str(e.value))
        assert says in msgs[0] and msgs[0] == msgs[1], msgs


def test_spec_argument_forms(shards):
    # Reader and the loader take a spec the same way (one conversion,
    # python/wds/_common.c): a str or bytes spec, or a sequence of URLs
    # (str or bytes) taken as is; anything else names the type.
    spec, paths, samples = shards
    keys = [k for ss in samples for k, _ in ss]

    def reader_keys(s):
        return sorted(x["__key__"] for x in wds.Reader(s))

    def loader_keys(s):  # one batch of all (the loader interleaves shards)
        lo = wds._wds._Loader(s, "cls", 100)
        try:
            b = lo.next()
            out = sorted(b.keys)
            b.release()
            return out
        finally:
            lo.close()

    for read in (reader_keys, loader_keys):
        assert read(spec) == keys
        assert read(spec.encode()) == keys
        assert read(paths) == keys
        assert read(tuple(p.encode() for p in paths)) == keys
        assert read([paths[2], paths[0]]) == sorted(k for k, _ in samples[2] + samples[0])
        # A URL of the list is not expanded: the braces are its name.
        with pytest.raises(wds.OpenError):
            read([spec])
    for name, make in (("Reader", wds.Reader),
                       ("Loader", lambda s: wds._wds._Loader(s, "cls", 1))):
        with pytest.raises(TypeError,
                           match=f"^{name}: spec must be a str or a sequence of URLs$"):
            make(5)
        with pytest.raises(TypeError, match="^expected str or bytes, not int$"):
            make([paths[0], 7])
        with pytest.raises(ValueError, match="^embedded null character$"):
            make("a\0b")
        with pytest.raises(ValueError, match="^embedded null character$"):
            make([b"a\0b"])
    with pytest.raises(TypeError, match="^Reader: spec must be"):
        wds.Reader(None)


def test_reader_retries():
    # A refused port: retries=1 is two attempts, named in the message (or
    # the build has no libcurl, and says so).
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = "http://127.0.0.1:%d/x.tar" % port
    with pytest.raises(wds.Error) as e:
        list(wds.Reader(url, retries=1))
    msg = str(e.value)
    assert url in msg
    assert ("gave up after 2 attempts" in msg or "built without libcurl" in msg)
    with pytest.raises(wds.Error) as e:
        list(wds.Reader(url, retries=0))  # tried once, as --retries 0
    assert "gave up" not in str(e.value)


def test_reader_close(shards):
    _, paths, _ = shards
    r = wds.Reader(paths[1])
    assert next(r)["__key__"] == "s1/k0000"
    r.close()
    r.close()
    assert r.closed
    with pytest.raises(ValueError):
        next(r)
    with pytest.raises(ValueError):
        r.stats()
    del r


def test_gil_released_while_reading(shards):
    """Another thread runs while next() waits on a slow pipe: shard."""
    _, paths, _ = shards
    count = 0
    stop = threading.Event()

    def spin():
        nonlocal count
        while not stop.is_set():
            count += 1
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    r = wds.Reader(f"pipe:sleep 1; cat {paths[0]}")
    t.start()
    try:
        t0 = time.monotonic()
        first = next(r)
        waited = time.monotonic() - t0
    finally:
        stop.set()
        t.join()
        r.close()
    assert first["__key__"] == "s0/k0000"
    assert waited >= 0.9
    assert count > 100, count  # ~1000 if the GIL was free for the second


def test_cancel_and_close_from_another_thread(shards):
    r = wds.Reader("pipe:sleep 30")
    threading.Timer(0.3, r.cancel).start()
    t0 = time.monotonic()
    with pytest.raises(wds.CancelledError):
        next(r)
    assert time.monotonic() - t0 < 10
    r.close()

    r = wds.Reader("pipe:sleep 30")
    threading.Timer(0.3, r.close).start()
    t0 = time.monotonic()
    with pytest.raises(wds.Error):
        next(r)
    assert time.monotonic() - t0 < 10
    assert r.closed


# ---- Index --------------------------------------------------------------

def test_index(tmp_path, shards):
    spec, paths, everything = shards
    out = tmp_path / "d.index.json"
    cli("index", spec, "-o", str(out))
    ix = wds.Index(str(out))
    assert len(ix) == 3
    assert ix.sizes == [5, 7, 3]
    assert ix.urls == [os.path.basename(p) for p in paths]
    sh = ix[1]
    assert sh["path"] == paths[1] and sh["nsamples"] == 7
    assert sh["filesize"] == os.path.getsize(paths[1])
    assert [s["key"] for s in sh["samples"]] == [k for k, _ in everything[1]]
    assert ix[-1]["url"] == "d-002.tar"
    with pytest.raises(IndexError):
        ix[3]
    assert ix.lookup(paths[2]) == 2
    with pytest.raises(wds.InvalidError):
        ix.lookup(str(tmp_path / "other.tar"))

    # A key's shard and member offsets: the member's header is at offset.
    key, fields = everything[1][4]
    where = ix.find(key)
    assert where["shard"] == 1 and where["sample"] == 4 and where["path"] == paths[1]
    raw = open(paths[1], "rb").read()
    for ext, (offset, size) in where["fields"].items():
        assert size == len(fields[ext])
        assert raw[offset:offset + 100].rstrip(b"\0") == f"{key}.{ext}".encode()
        assert raw[offset + 512:offset + 512 + size] == fields[ext]
    with pytest.raises(KeyError):
        ix.find("nope")

    light = wds.Index(out, samples=False)  # a path-like is accepted
    assert light.sizes == [5, 7, 3] and "samples" not in light[0]
    with pytest.raises(ValueError):
        light.find(key)

    # Stale: the shard changed size.
    with open(paths[2], "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(wds.CorruptError) as e:
        ix.lookup(paths[2])
    assert "stale" in str(e.value)


def test_index_errors(tmp_path):
    with pytest.raises(wds.OpenError):
        wds.Index(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"wids_version": 1, "shardlist": [')
    with pytest.raises(wds.Error) as e:
        wds.Index(str(bad))
    assert str(bad) in str(e.value)


def _serve(directory):
    """An HTTP server on loopback serving directory, in a thread; returns
    (server, base URL, list of the paths requested)."""
    import functools
    import http.server

    requested = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            requested.append(self.path)
            super().do_GET()

    srv = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=directory))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, "http://127.0.0.1:%d" % srv.server_address[1], requested


def test_reader_cache_dir(shards, tmp_path):
    # Remote shards read whole are kept in cache_dir: a second reader gets
    # the same samples without a request; a local shard is never cached.
    _, paths, _ = shards
    local = list(wds.Reader(paths))
    srv, base, requested = _serve(os.path.dirname(paths[0]))
    try:
        urls = [base + "/" + os.path.basename(p) for p in paths]
        cache = tmp_path / "cache"
        r = wds.Reader(urls, cache_dir=cache, cache_size=10 << 20)
        try:
            first = list(r)
        except wds.Error as e:
            if "built without libcurl" in str(e):
                pytest.skip("built without libcurl")
            raise
        r2 = wds.Reader(urls, cache_dir=str(cache))
        second = list(r2)
        st = r2.stats()
        # Without cache_dir: $WDS_CACHE_DIR, read by the library (as the
        # CLI's --cache-dir default), so the same entries serve this one.
        os.environ["WDS_CACHE_DIR"] = str(cache)
        try:
            r3 = wds.Reader(urls)
            third = list(r3)
            st3 = r3.stats()
        finally:
            del os.environ["WDS_CACHE_DIR"]
    finally:
        srv.shutdown()
        srv.server_close()

    def plain(samples):
        return [{k: v for k, v in s.items() if k != "__url__"} for s in samples]
    assert plain(first) == plain(local)
    assert plain(second) == plain(local)
    assert len(requested) == len(paths)  # the first reader's only
    assert st["cache_hits"] == len(paths)
    assert st["cache_stored"] == 0 and st["cache_errors"] == 0
    assert plain(third) == plain(local)
    assert st3["cache_hits"] == len(paths) and len(requested) == len(paths)
    assert len([f for f in os.listdir(cache) if not f.startswith(".")]) == len(paths)
    list(wds.Reader(paths, cache_dir=tmp_path / "c2"))
    assert not (tmp_path / "c2").exists()
    with pytest.raises(ValueError):
        wds.Reader(paths, cache_dir=cache, cache_size=-1)
    with pytest.raises(TypeError):
        wds.Reader(paths, cache_dir=5)


def test_reader_early_stop_keeps_no_cache_entry(tmp_path):
    # A compressed shard smaller than the stream's 1 MiB read-ahead ring:
    # its reading thread reads the whole transfer while the Reader waits on
    # its first sample. A Reader closed after one sample and a pause keeps
    # nothing (an entry was kept in every run before), five times over; a
    # Reader read to the end keeps the shard.
    import gzip
    www = tmp_path / "www"
    www.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for i in range(20):
            data = (("sample %d " % i) * 3000).encode()
            ti = tarfile.TarInfo("s%03d.txt" % i)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    (www / "a.tar.gz").write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    srv, base, _ = _serve(str(www))
    try:
        url = base + "/a.tar.gz"
        for k in range(5):
            cache = tmp_path / ("c%d" % k)
            r = wds.Reader(url, cache_dir=cache)
            try:
                first = next(iter(r))
            except wds.Error as e:
                if "built without libcurl" in str(e):
                    pytest.skip("built without libcurl")
                raise
            assert first["__key__"] == "s000"
            time.sleep(0.2)
            r.close()
            left = os.listdir(cache) if cache.exists() else []
            assert [f for f in left if not f.startswith(".") or
                    f.startswith(".tmp")] == [], (k, left)
        whole = tmp_path / "whole"
        assert len(list(wds.Reader(url, cache_dir=whole))) == 20
        assert len([f for f in os.listdir(whole)
                    if not f.startswith(".")]) == 1
    finally:
        srv.shutdown()
        srv.server_close()
