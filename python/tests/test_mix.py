"""wds.Loader over several sources (wds.Source): Batch.sources, resampled
frequencies, exact repeats over ranks, resume, equality with
`wds batches --source`, and the refused configurations."""
import collections
import json
import math
import os
import subprocess

import numpy as np
import pytest

import wds

CLI = os.environ.get("WDS_TEST_CLI", "")


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """Source 0: 3 shards x 6 samples (cls 0..17); source 1: 2 x 4 (cls
    1000..1007): a row's cls tells its source and sample."""
    d = tmp_path_factory.mktemp("mix")
    specs = []
    for s, (shards, per) in enumerate([(3, 6), (2, 4)]):
        with wds.ShardWriter(str(d / f"s{s}-%03d.tar"), maxcount=per,
                             sync=False) as w:
            for i in range(shards * per):
                w.write({"__key__": f"s{s}k{i:03d}", "cls": 1000 * s + i})
        specs.append(str(d / f"s{s}-{{000..{shards - 1:03d}}}.tar"))
    return specs


def rows(loader, epochs=1):
    out = []
    for _ in range(epochs):
        for b in loader:
            cls = b["cls"].copy()
            src = b.sources
            assert src.dtype == np.uint32 and len(src) == b.rows
            out += [(int(c), int(s)) for c, s in zip(cls, src)]
    return out


def test_sources_resampled_weights(two):
    with wds.Loader(fields="cls", batch_size=16, mode="resampled", samples_per_epoch=4000,
                    seed=3, shuffle_buffer=20, rank=0, world_size=1,
                    sources=[wds.Source(two[0], weight=1),
                             wds.Source(two[1], weight=3)]) as loader:
        r = rows(loader)
    assert len(r) == 4000
    assert all(c // 1000 == s for c, s in r)
    n1 = sum(s for _, s in r)
    sd = math.sqrt(4000 * 0.75 * 0.25)
    assert abs(n1 - 3000) <= 3 * sd, n1


def test_sources_exact_repeat_over_ranks(two):
    seen = collections.Counter()
    lens = set()
    for rank in range(2):
        with wds.Loader(None, "cls", 4, mode="exact", seed=5, shuffle_buffer=4,
                        rank=rank, world_size=2,
                        sources=[wds.Source(two[0]),
                                 wds.Source(two[1], repeat=2)]) as loader:
            r = rows(loader)
            lens.add(len(loader))
        assert all(c // 1000 == s for c, s in r)
        seen.update(c for c, _ in r)
    assert len(lens) == 1
    assert {c: n for c, n in seen.items() if c < 1000} == {c: 1 for c in range(18)}
    assert {c: n for c, n in seen.items() if c >= 1000} == {
        1000 + c: 2 for c in range(8)}


def test_sources_resume_and_determinism(two):
    def make(**kw):
        return wds.Loader(None, "cls", 3, mode="exact", seed=9, shuffle_buffer=5,
                          rank=0, world_size=1,
                          sources=[wds.Source(two[0]),
                                   wds.Source(two[1], proportion=0.5)], **kw)

    with make() as a, make() as b:
        full = rows(a, 2)
        assert rows(b, 2) == full
    with make() as loader:
        it = iter(loader)
        first = [next(it), next(it)]
        state = loader.state_dict()
        del first
    with make() as loader:
        loader.load_state_dict(state)
        tail = rows(loader, 2)
    assert tail == full[6:]
    # A state through JSON (lists for tuples) still fits; other sources not.
    state = json.loads(json.dumps(state))
    with make() as loader:
        loader.load_state_dict(state)
        assert rows(loader, 2) == full[6:]
    with wds.Loader(None, "cls", 3, mode="exact", seed=9, shuffle_buffer=5,
                    rank=0, world_size=1,
                    sources=[wds.Source(two[0]),
                             wds.Source(two[1], proportion=0.25)]) as other:
        with pytest.raises(ValueError, match="sources"):
            other.load_state_dict(state)
    with wds.Loader(two[0], "cls", 3, mode="exact", seed=9, shuffle_buffer=5,
                    rank=0, world_size=1) as one:
        with pytest.raises(ValueError, match="sources"):
            one.load_state_dict(state)


def test_sources_equal_cli(two, tmp_path):
    if not CLI:
        pytest.skip("WDS_TEST_CLI not given")
    p = subprocess.run([CLI, "batches", "--source", two[0], "--source",
                        two[1] + ":repeat=1.5", "--decode", "cls", "--json",
                        "--mode", "exact", "--batch-size", "4", "--seed", "2",
                        "--shuffle-buffer", "3"], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    cli = [json.loads(line) for line in p.stdout.decode().splitlines()]
    with wds.Loader(None, "cls", 4, mode="exact", seed=2, shuffle_buffer=3,
                    rank=0, world_size=1,
                    sources=[wds.Source(two[0]),
                             wds.Source(two[1], repeat=1.5)]) as loader:
        py = [(b.sample_keys, b.sources.tolist()) for b in loader]
    assert py == [(c["keys"], c["sources"]) for c in cli]


def test_sources_one_source_is_the_spec(two):
    def run(**kw):
        with wds.Loader(kw.pop("spec", None), "cls", 4, mode="exact", seed=1,
                        shuffle_buffer=3, rank=0, world_size=1, **kw) as loader:
            return rows(loader)

    assert run(spec=two[0]) == run(sources=[wds.Source(two[0])])


def test_sources_refused(two):
    with pytest.raises(ValueError):
        wds.Source(two[0], weight=1, repeat=2)
    with pytest.raises(ValueError):
        wds.Source(two[0], weight=0)
    with pytest.raises(ValueError):
        wds.Loader(two[0], "cls", 4, sources=[wds.Source(two[1])])
    with pytest.raises(ValueError):
        wds.Loader(None, "cls", 4)
    with pytest.raises(TypeError, match="fields is required"):
        wds.Loader(sources=[wds.Source(two[0])], batch_size=4)
    with pytest.raises(TypeError):
        wds.Loader(None, "cls", 4, sources=[two[0]])
    with pytest.raises(wds.InvalidError, match="plain mode"):
        wds.Loader(None, "cls", 4, mode="plain", rank=0, world_size=1,
                   sources=[wds.Source(two[0]), wds.Source(two[1])])
    with pytest.raises(wds.InvalidError, match="weight is for resampled"):
        wds.Loader(None, "cls", 4, mode="exact", rank=0, world_size=1,
                   sources=[wds.Source(two[0]), wds.Source(two[1], weight=2)])


def test_sources_exact_elastic_resume_2_to_3(two):
    """A state saved on 2 ranks over two sources (the second twice per
    epoch) resumes on 3 ranks with another batch size and workers: the
    valid rows before and after the stop are each sample its count, none
    missed, none repeated (the padding is marked invalid), and every new
    rank takes the same number of batches."""
    def make(rank, world, bs, workers):
        return wds.Loader(None, "cls", bs, mode="exact", seed=4,
                          shuffle_buffer=4, max_sample_bytes=1 << 16,
                          rank=rank, world_size=world, workers=workers,
                          sources=[wds.Source(two[0]),
                                   wds.Source(two[1], repeat=2)])

    def take(b):
        keep = [int(c) for c, v in zip(b["cls"], b.valid) if v]
        pads = int((~b.valid).sum())
        b.release()
        return keep, pads

    seen = collections.Counter()
    state = None
    for rank in range(2):
        with make(rank, 2, 4, 2) as a:
            it = iter(a)
            for _ in range(2):
                seen.update(take(next(it))[0])
            if rank == 1:
                state = a.state_dict()
    steps, pads = set(), 0
    for rank in range(3):
        with make(rank, 3, 3, 1) as b:
            b.load_state_dict(state)
            assert b.elastic is not None and b.elastic[0] == 2
            n = 0
            for x in b:
                keep, p = take(x)
                seen.update(keep)
                pads += p
                n += 1
            steps.add(n)
    assert len(steps) == 1, steps
    want = {c: 1 for c in range(18)}
    want.update({1000 + c: 2 for c in range(8)})
    assert dict(seen) == want
