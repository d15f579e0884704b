"""ctest python_mypy: mypy --strict checks this program against the package's
type stubs (python/wds/__init__.pyi). Not run, only type-checked: it uses the
public API as a user would, so a stub that is wrong or missing fails it.
Not named test_*: pytest leaves it out."""
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

import wds


def loader_use(spec: str) -> int:
    urls: List[str] = wds.expand(spec)
    rows = 0
    with wds.Loader(spec, "jpg:rgb:224,cls", 32, mode="exact", workers=2,
                    seed=1, index=None, shuffle_buffer=100) as loader:
        n: int = len(loader)
        for batch in loader:
            keys: List[str] = batch.sample_keys
            fields: Dict[str, Any] = dict(batch)
            names: List[str] = list(batch.keys())
            valid: np.ndarray = batch.valid
            rows += batch.rows + len(keys) + len(fields) + len(names) + n
            batch.release()
        state: Dict[str, Any] = loader.state_dict()
        loader.load_state_dict(state)
    mix = wds.Loader(fields="npy,cls", batch_size=8, mode="resampled",
                     samples_per_epoch=100,
                     sources=[wds.Source(urls[0], weight=2), wds.Source(spec)])
    b: Optional[wds.Batch] = mix.next()
    if b is not None:
        rows += int(b.sources.sum())
    return rows


def _augment(sample: Dict[str, Any]) -> Dict[str, Any]:
    return {"img": sample["jpg"][:8, :8], "cls": sample["cls"]}


def transform_use(spec: str) -> int:
    rows = 0
    try:
        with wds.Loader(spec, "jpg:rgb:16,cls", 8, transform=_augment,
                        transform_workers=2, transform_timeout=30.0,
                        transform_start_method="forkserver",
                        transform_fields={"img": ((8, 8, 3), "uint8"),
                                          "cls": ((), np.int64)}) as ld:
            for batch in ld:
                rows += batch.rows
            skipped: int = ld.stats()["transform_skipped"]
            rows += skipped
    except wds.TransformError as e:
        key: Optional[str] = e.key
        tb: Optional[str] = e.worker_traceback
        rows += len(key or "") + len(tb or "")
    return rows


def reader_use(spec: str) -> List[str]:
    out: List[str] = []
    with wds.Reader(spec, read_timeout_ms=1000) as r:
        for s in r:
            out.append(s["__key__"])
    ix = wds.Index("index.json")
    out += ix.urls
    with wds.ShardWriter("out-%06d.tar", maxcount=10) as w:
        w.write({"__key__": "k", "txt": "x"})
    try:
        next(iter(wds.Reader("missing.tar")))
    except wds.NotFoundError as e:
        out.append(e.status_name)
    return out


def tag(sample: Dict[str, Any]) -> Dict[str, Any]:
    sample["n"] = len(sample["txt"])
    return sample


def dataset_use(spec: str) -> Iterator[Any]:
    ds = wds.Dataset(spec, "jpg:rgb:224,cls,txt", shuffle_buffer=100,
                     index="index.json").map(tag).batched(16)
    ds.set_epoch(1)
    ds.load_state_dict(ds.state_dict())
    return iter(ds)


def webdataset_use(spec: str) -> Iterator[Any]:
    ds = (wds.WebDataset(spec, resampled=False, shardshuffle=100,
                         nodesplitter=wds.split_by_node,
                         handler=wds.warn_and_continue)
          .shuffle(1000).decode("rgb8").to_tuple("jpg;png", "cls")
          .map_tuple(lambda im: im, None).batched(8).with_epoch(100))
    loader = wds.WebLoader(ds, batch_size=None, num_workers=2).unbatched()
    return iter(loader)
