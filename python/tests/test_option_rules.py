"""The rules between loader options are the library's (loader/options.c,
wds_loader_config_check): wds.Loader and wds.Dataset give the library's
messages, naming the keywords; drop_last's last batch is decided by the
library; the docstrings' option lists are made from the option table."""
import re

import numpy as np
import pytest

import wds


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    d = tmp_path_factory.mktemp("rules")
    with wds.ShardWriter(str(d / "r-%02d.tar"), maxcount=5, sync=False) as w:
        for k in range(10):  # 2 shards of 5
            w.write({"__key__": f"k{k:03d}", "cls": k})
    return str(d / "r-{00..01}.tar")


def batches(loader):
    with loader:
        return [b.rows for b in loader]


@pytest.mark.parametrize("mode", ["plain", "exact", "resampled"])
def test_drop_last_decides_an_unset_last_batch(spec, mode):
    """drop_last drops a partial last batch unless last_batch is given
    (which wins): the library's rule (last_batch's unset default), with no
    copy in the extension. 10 samples in batches of 4."""
    kw = dict(mode=mode, workers=1, world_size=1, rank=0)
    if mode == "resampled":
        kw["samples_per_epoch"] = 10
    assert batches(wds.Loader(spec, "cls", 4, **kw)) == [4, 4, 2]
    assert batches(wds.Loader(spec, "cls", 4, drop_last=True, **kw)) == [4, 4]
    assert batches(wds.Loader(spec, "cls", 4, drop_last=True,
                              last_batch="keep", **kw)) == [4, 4, 2]
    assert batches(wds.Loader(spec, "cls", 4, last_batch="drop",
                              **kw)) == [4, 4]
    lo = wds.Loader(spec, "cls", 4, drop_last=True, **kw)
    assert "last_batch=drop" in lo.state_dict()["state"]
    lo.close()


RULES = [
    # (keywords, the message's words)
    (dict(mode="resampled"),
     'mode="resampled" needs samples_per_epoch'),
    (dict(mode="exact", samples_per_epoch=8),
     'samples_per_epoch is not used in mode="exact"'),
    (dict(mode="resampled", samples_per_epoch=8, shard_shuffle=False),
     'shard_shuffle=False is not used in mode="resampled"'),
    (dict(mode="plain", index="x.json"),
     'index is only used in mode="exact"'),
    (dict(mode="exact", shuffle_buffer=4, shuffle_initial=9),
     "shuffle_initial 9 is larger than shuffle_buffer 4"),
    (dict(mode="exact", rank=2, world_size=2),
     "rank 2 is not below world_size 2"),
]


@pytest.mark.parametrize("kw,words", RULES)
def test_loader_names_the_keywords(spec, kw, words):
    with pytest.raises(wds.InvalidError, match=re.escape(words)):
        wds.Loader(spec, "cls", 2, **kw)


@pytest.mark.parametrize("kw,words", RULES)
def test_dataset_checks_at_construction(spec, kw, words):
    """wds.Dataset opens its loaders in the DataLoader's workers; the
    library's check runs when it is made, with the library's message (the
    Python copy of "resampled needs samples_per_epoch" is gone)."""
    with pytest.raises(wds.InvalidError, match=re.escape(words)):
        wds.Dataset(spec, "cls", **kw)


def test_check_loader_options_refuses_a_bad_value():
    with pytest.raises(wds.InvalidError, match='mode must be plain'):
        wds._wds.check_loader_options(mode="exactly")
    with pytest.raises(TypeError, match="not_an_option"):
        wds._wds.check_loader_options(not_an_option=1)
    assert wds._wds.check_loader_options(mode="resampled",
                                         samples_per_epoch=3) is None


def _doc_options(doc):
    """The keywords of a docstring's generated option list."""
    part = doc.split("Options, from the library's option table")[1]
    return re.findall(r"^    ([a-z_]+)(?:=\w+)? \(--[a-z-]+\):", part, re.M)


def test_docstrings_list_the_option_table():
    """wds.Loader's and wds.Dataset's docstrings list every row of the
    library's option table they take, with its help text, made at import:
    a new row documents itself."""
    rows = wds._wds.loader_option_help()
    names = [r[0] for r in rows]
    assert len(rows) >= 30
    loader = _doc_options(wds.Loader.__doc__)
    assert loader == [n for n in names if n != "resume_batches"]
    refused = {"resume_batches", "batch_size", "workers", "last_batch",
               "jpeg_decode", "eager_next_epoch"}
    assert _doc_options(wds.Dataset.__doc__) == \
        [n for n in names if n not in refused]
    flat = " ".join(wds.Loader.__doc__.split())
    by_flag = {r[1]: r[0] for r in rows}
    for name, flag, text, cli_value in rows:
        if name == "resume_batches":
            continue
        words = re.sub(r"--([a-z][a-z0-9-]*)",
                       lambda m: by_flag.get(m.group(1), m.group(0)),
                       " ".join(text.split()))
        key = name if cli_value is None else f"{name}={cli_value == '1'}"
        assert f"{key} (--{flag}): {words}" in flat, name
    # every Dataset keyword the table has is documented
    import inspect
    own = set(inspect.signature(wds.Dataset.__init__).parameters)
    assert own & set(names) <= set(_doc_options(wds.Dataset.__doc__))
    assert np.all([n in flat for n in ("shard_shuffle=False",
                                        "drop_last=True")])
