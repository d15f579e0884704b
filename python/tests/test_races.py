"""Threads, stalls and signals against the binding:
every call that runs without the GIL is guarded against the handle's other
calls, a FIFO without a writer times out, and Ctrl-C reaches a call blocked
on a stalled source."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import wds


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    d = tmp_path_factory.mktemp("races")
    with wds.ShardWriter(str(d / "r-%03d.tar"), maxcount=40, sync=False) as w:
        for k in range(40):
            w.write({"__key__": f"k{k:04d}", "cls": k % 10})
    return str(d / "r-000.tar")


def wait_busy(loader, timeout=20):
    """Returns once another thread is inside a call on loader: its
    state_dict() (which reads nothing a call changes) then raises "another
    thread". The event the tests wait on, instead of a sleep long enough."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            loader.state_dict()
        except RuntimeError as e:
            if "another thread" in str(e):
                return
            raise
        time.sleep(0.005)
    raise AssertionError(f"no call on the loader within {timeout} s")


def wait_file(path, timeout=20):
    """Returns once path exists (a pipe: command's sign that it runs)."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} not made within {timeout} s"
        time.sleep(0.005)


def blocked_next(loader):
    """Starts loader.next() in a thread; returns (thread, outcome list)
    once the thread is inside the call."""
    out = []

    def run():
        try:
            out.append(loader.next())
        except Exception as e:  # noqa: BLE001 - the test looks at it
            out.append(e)

    t = threading.Thread(target=run)
    t.start()
    wait_busy(loader)
    assert t.is_alive() and not out, out
    return t, out


def test_set_epoch_while_next_waits_raises():
    loader = wds.Loader("pipe:sleep 1001", "cls", 1, mode="plain", workers=1,
                        read_timeout_ms=0)  # 0: no timeout
    t, out = blocked_next(loader)
    try:
        with pytest.raises(RuntimeError, match="another thread"):
            loader.set_epoch(3)
        with pytest.raises(RuntimeError, match="another thread"):
            loader.state_dict()
    finally:
        loader.close()
        t.join(10)
    assert not t.is_alive()
    assert len(out) == 1 and isinstance(out[0], wds.CancelledError), out
    assert loader.closed


def slow_set_epoch(loader):
    """Starts loader.set_epoch(1) in a thread and returns it (and its
    outcome list) while the call is still stopping the run: the worker's
    pipe: command ignores SIGTERM, so closing it takes about 2 s (SIGKILL
    after the grace period)."""
    out = []

    def run():
        t0 = time.monotonic()
        try:
            out.append(loader.set_epoch(1))
        except Exception as e:  # noqa: BLE001 - the test looks at it
            out.append(e)
        out.append(time.monotonic() - t0)

    t = threading.Thread(target=run)
    t.start()
    wait_busy(loader)
    assert t.is_alive() and not out, ("set_epoch returned early", out)
    return t, out


def stalling_loader(shard, tmp_path):
    """A loader whose first batch is the good shard and whose worker then
    waits on a command that ignores SIGTERM (returned once the command
    runs)."""
    mark = tmp_path / "stall-started"
    lo = wds.Loader([shard, f"pipe:trap '' TERM; touch {mark}; sleep 1003"],
                    "cls", 20, mode="plain", workers=1, shard_shuffle=False,
                    read_timeout_ms=0)  # 0: no timeout
    b = lo.next()
    assert b is not None and len(b.keys) == 20
    b.release()
    wait_file(mark)  # the worker reached the command
    return lo


def within(seconds, fn):
    """fn()'s result or exception, run in a thread that must end within
    seconds (else the test fails instead of hanging)."""
    out = []

    def run():
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} did not return within {seconds} s"
    return out[0]


def test_next_while_set_epoch_runs_raises(shard, tmp_path):
    lo = stalling_loader(shard, tmp_path)
    t, out = slow_set_epoch(lo)
    r = within(10, lo.next)
    assert isinstance(r, RuntimeError) and "another thread" in str(r), r
    t.join(30)
    assert out[0] is None, out
    lo.close()


def test_close_while_set_epoch_runs_waits_for_it(shard, tmp_path):
    """close() during set_epoch() must not free the handle under it (a
    heap-use-after-free under ASan): the loader closes when set_epoch
    returns."""
    lo = stalling_loader(shard, tmp_path)
    t, out = slow_set_epoch(lo)
    t0 = time.monotonic()
    lo.close()
    assert time.monotonic() - t0 < 1.0, "close() waited for set_epoch"
    assert lo.closed
    t.join(30)
    assert not t.is_alive()
    assert len(out) == 2, out
    with pytest.raises(ValueError, match="closed"):
        lo.next()


@pytest.mark.parametrize("rounds", [12])
def test_set_epoch_against_next_and_close_in_threads(shard, rounds):
    """set_epoch() in one thread beside next() and close() in others:
    each call either runs alone or raises (RuntimeError: busy; ValueError:
    closed), nothing hangs, nothing is used after it is freed (ASan)."""
    for r in range(rounds):
        loader = wds.Loader(shard, "cls", 2, workers=2, prefetch=2)
        stop = threading.Event()
        errors = []
        # close() comes after each thread made `calls` calls (more each
        # round, so it meets them at other points), and each thread goes on
        # until it has met the closed loader at least once.
        calls = 2 + 3 * (r % 4)
        busy = [threading.Event(), threading.Event()]
        closed_seen = [threading.Event(), threading.Event()]

        def epochs():
            e = 0
            while not stop.is_set():
                try:
                    loader.set_epoch(e % 3)
                except RuntimeError:
                    pass
                except ValueError:
                    closed_seen[0].set()
                except Exception as ex:  # noqa: BLE001
                    errors.append(ex)
                e += 1
                if e >= calls:
                    busy[0].set()

        def batches():
            n = 0
            while not stop.is_set():
                try:
                    b = loader.next()
                    if b is not None:
                        b.release()
                except RuntimeError:
                    pass
                except (ValueError, wds.CancelledError):
                    closed_seen[1].set()
                except Exception as ex:  # noqa: BLE001
                    errors.append(ex)
                n += 1
                if n >= calls:
                    busy[1].set()

        ts = [threading.Thread(target=epochs), threading.Thread(target=batches)]
        for t in ts:
            t.start()
        for ev in busy:
            assert ev.wait(20), f"round {r}: a thread made no {calls} calls"
        loader.close()
        for ev in closed_seen:
            assert ev.wait(20), f"round {r}: a thread never met the closed loader"
        stop.set()
        for t in ts:
            t.join(20)
        assert not any(t.is_alive() for t in ts), f"round {r}: a thread hangs"
        assert not errors, errors
        assert loader.closed


def test_closed_loader_refuses_set_epoch(shard):
    loader = wds.Loader(shard, "cls", 2, mode="plain", workers=1)
    loader.close()
    with pytest.raises(ValueError, match="closed"):
        loader.set_epoch(1)


# ---- a FIFO without a writer (item 2) ----------------------------------

def test_loader_on_a_fifo_times_out_and_closes(tmp_path):
    fifo = tmp_path / "nowriter.tar"
    os.mkfifo(fifo)
    lo = within(20, lambda: wds.Loader(str(fifo), "cls", 1, mode="plain",
                                       workers=1, read_timeout_ms=1000))
    assert not isinstance(lo, BaseException), lo
    r = within(20, lo.next)
    assert isinstance(r, wds.TimeoutError) and "no data for 1.0 s" in str(r), r
    assert within(10, lo.close) is None
    # exact mode: the counting pass at construction times out the same way
    r = within(20, lambda: wds.Loader(str(fifo), "cls", 1,
                                      read_timeout_ms=1000))
    assert isinstance(r, wds.TimeoutError) and "no data for 1.0 s" in str(r), r


def test_close_returns_while_next_waits_on_a_fifo(tmp_path):
    fifo = tmp_path / "nowriter.tar"
    os.mkfifo(fifo)
    lo = wds.Loader(str(fifo), "cls", 1, mode="plain", workers=1,
                    read_timeout_ms=0)  # 0: no timeout
    t, out = blocked_next(lo)
    assert within(10, lo.close) is None
    t.join(10)
    assert not t.is_alive() and isinstance(out[0], wds.CancelledError), out


def test_reader_on_a_fifo_times_out(tmp_path):
    fifo = tmp_path / "nowriter.tar"
    os.mkfifo(fifo)
    r = wds.Reader(str(fifo), read_timeout_ms=1000)
    e = within(20, lambda: next(iter(r)))
    assert isinstance(e, wds.TimeoutError) and "no data for 1.0 s" in str(e), e
    r.close()


# ---- Ctrl-C while a call waits (item 3) --------------------------------

CASES = {
    # Loader.next() on a stalled source (plain mode: no counting pass);
    # then the loader is as it was: closable, its position unchanged.
    "loader_next": """
        lo = wds.Loader("pipe:touch {mark}; sleep {n}", "cls", 1, mode="plain",
                        workers=1)
        ready()
        try:
            lo.next()
        finally:
            assert lo.state_dict()["batches"] == 0
            lo.close()
    """,
    # exact mode counts the shard's samples at construction
    "loader_counting": """
        ready()
        wds.Loader("pipe:touch {mark}; sleep {n}", "cls", 1)
    """,
    # ... under on_error="skip" too (a counter once noted its cancelled
    # read as a skipped shard for ever)
    "loader_counting_skip": """
        ready()
        wds.Loader("pipe:touch {mark}; sleep {n}", "cls", 1, on_error="skip")
    """,
    # exact mode reads a shard its index gives 0 samples, to check it is
    # empty (here a FIFO without a writer)
    "loader_zero_count_check": """
        import json, os, tempfile
        d = tempfile.mkdtemp()
        os.mkfifo(d + "/s.tar")
        with open(d + "/ix.json", "w") as f:
            json.dump({{"wids_version": 1, "shardlist":
                       [{{"url": d + "/s.tar", "nsamples": 0}}]}}, f)
        ready()
        try:
            wds.Loader(d + "/s.tar", "cls", 1, index=d + "/ix.json")
        finally:
            os.unlink(d + "/s.tar")
    """,
    "reader": """
        r = wds.Reader("pipe:touch {mark}; sleep {n}")
        ready()
        try:
            for s in r:
                pass
        finally:
            r.close()
    """,
    # a compressed stream read by its reading thread: the caller waits on
    # the thread's ring
    "reader_read_thread": """
        r = wds.Reader("pipe:zstd -qc {shard} | head -c 600; touch {mark}; sleep {n}")
        ready()
        try:
            for s in r:
                pass
        finally:
            r.close()
    """,
}


def main_thread_blocked(pid):
    """Whether process pid's main thread sleeps in the kernel (state S in
    /proc/PID/task/PID/stat). The child runs one Python thread: after its
    "ready", it runs bytecode (R) until it is inside the call, waiting."""
    with open(f"/proc/{pid}/task/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


@pytest.mark.parametrize("case", sorted(CASES))
def test_ctrl_c_reaches_a_blocked_call(case, shard, tmp_path):
    n = 1100 + sorted(CASES).index(case)
    # The command's sign that it runs ({mark}), where the case has one.
    mark = tmp_path / "command-started"
    has_mark = "{mark}" in CASES[case]
    body = textwrap.indent(textwrap.dedent(CASES[case]).format(n=n, shard=shard,
                                                               mark=mark),
                           "    ")
    code = ("import sys, wds\n"
            "def ready():\n"
            "    print('ready', flush=True)\n"
            "try:\n" + body +
            "except KeyboardInterrupt:\n"
            "    print('KeyboardInterrupt', flush=True)\n"
            "    sys.exit(42)\n")
    env = dict(os.environ, WDS_READ_THREAD="1")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, text=True)
    try:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
        # Inside the call, waiting on the command: it runs, and the child's
        # one thread sleeps in the kernel.
        deadline = time.monotonic() + 20
        while not ((not has_mark or mark.exists()) and main_thread_blocked(p.pid)):
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() < deadline, "the child never waited in the call"
            time.sleep(0.005)
        assert p.poll() is None, p.stderr.read()
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 42 and "KeyboardInterrupt" in out, (p.returncode, out, err)
    assert took < 5, f"KeyboardInterrupt after {took:.1f} s"


def test_loader_goes_on_after_ctrl_c(shard):
    """A KeyboardInterrupt in next() leaves the loader as it was: the next
    call delivers the batch it was waiting for."""
    code = textwrap.dedent(f"""
        import os, signal, threading, time, wds
        lo = wds.Loader("pipe:sleep 3; cat {shard}", "cls", 4, mode="plain",
                        workers=1)

        def interrupt_inside_next():
            # once next() waits (state_dict() then says "another thread")
            while True:
                try:
                    lo.state_dict()
                except RuntimeError:
                    break
                time.sleep(0.005)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt_inside_next, daemon=True).start()
        try:
            lo.next()
            print("no interrupt")
        except KeyboardInterrupt:
            b = lo.next()
            print(b.keys, lo.state_dict()["batches"])
        lo.close()
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "['k0000', 'k0001', 'k0002', 'k0003'] 1", p.stdout
