"""wds: WebDataset shards into training, from Python.

The C library (include/wds/) through a CPython extension, wds._wds:

- ``wds.expand(spec) -> list[str]``: the shard URLs a spec expands to.
- ``wds.Reader(spec, **options)``: samples as dicts
  ``{"__key__": str, "__url__": str, EXT: bytes, ...}``, the raw samples of
  Python webdataset.
- ``wds.Index(path)``: a shard-set index (``wds index``): shard count and sizes,
  a key's shard and member offsets.
- ``wds.ShardWriter(pattern, maxcount=100000, maxsize=3e9, compress=None)``:
  webdataset's ShardWriter over the C writer.
- ``wds.Loader(spec, fields, batch_size, **options)``: the loader's batches
  (``wds.Batch``: numpy arrays viewing the pool slot without a copy; a bytes
  field is a ``wds.BytesField``, a sequence of bytes made on access;
  ``device="cuda"``: ``wds.DeviceBatch``, torch tensors on the GPU, copied
  on the loader's own stream, the slot held until the copies are over);
  ``wds.Loader(fields=..., batch_size=..., sources=[wds.Source(spec,
  weight=...), ...])`` mixes shard sets (``Batch.sources``: each row's).
- ``wds.Error``: every failure, with one subclass per status code of
  wds/status.h (``wds.OpenError``, ``wds.TruncatedError``, ...), carrying the
  library's message; ``.status`` is the code, ``.status_name`` its name.
  Each also derives from the builtin Python code catches: ``OpenError``,
  ``IOError``, ``CommandError`` and ``TimeoutError`` from ``OSError``
  (a missing local file raises ``wds.NotFoundError``, also a
  ``FileNotFoundError``; ``PermissionDeniedError`` and ``IsDirectoryError``
  likewise), ``InvalidError``, ``SpecError``, ``LimitError`` and the bad-data
  errors (``CorruptError``, ``FormatError``, ``DecompressError``,
  ``DuplicateError``) from ``ValueError``, ``TruncatedError`` from
  ``EOFError``, ``NoMemoryError`` from ``MemoryError``. Messages name the
  Python keywords (``mode="resampled"``), not the command's flags.
  ``wds.IOError`` and ``wds.TimeoutError`` are not in ``__all__``: ``from
  wds import *`` leaves the builtins of those names alone.
- ``wds.Dataset(spec, fields, ...)``: a torch IterableDataset of decoded
  samples for ``DataLoader(num_workers=N)`` and torchdata's
  StatefulDataLoader, exact over ranks and workers; ``wds.Loader(...,
  transform=fn)``: fn on each such sample in the loader's own worker
  processes (``wds.TransformError``); ``wds.WebDataset``,
  ``wds.WebLoader`` and webdataset's verbs (docs/migrate-webdataset.md).
"""

from ._wds import (
    BytesField,
    CancelledError,
    CommandError,
    CorruptError,
    DecompressError,
    DuplicateError,
    Error,
    FormatError,
    InvalidError,
    IOError,
    IsDirectoryError,
    LimitError,
    NoMemoryError,
    NotFoundError,
    OpenError,
    PermissionDeniedError,
    SpecError,
    TimeoutError,
    TruncatedError,
    __version__,
    expand,
)
from ._device import DeviceBatch
from ._loader import Batch, Loader, Source
from ._reader import Index, Reader
from ._writer import ShardWriter

__all__ = [
    "Batch",
    "BytesField",
    "DeviceBatch",
    "Loader",
    "TransformError",
    "CancelledError",
    "CommandError",
    "CorruptError",
    "DecompressError",
    "DuplicateError",
    "Error",
    "FormatError",
    "Index",
    "InvalidError",
    "IsDirectoryError",
    "LimitError",
    "NoMemoryError",
    "NotFoundError",
    "OpenError",
    "PermissionDeniedError",
    "Reader",
    "ShardWriter",
    "Source",
    "SpecError",
    "TruncatedError",
    "__version__",
    "expand",
]


# The torch side (wds.Dataset, wds.WebDataset, ...) imports torch: loaded on
# first use, so that `import wds` (and `from wds import *`, which leaves
# them out) stays light.
_LAZY = {"Dataset": "_dataset", "default_collate": "_dataset",
         "TransformError": "_transform"}  # numpy, not torch
_LAZY.update((n, "_webdataset") for n in (
    "WebDataset", "WebLoader", "DataPipeline", "FluidInterface", "Decoder",
    "DecodingError", "Continue", "split_by_node", "split_by_worker",
    "single_node_only", "reraise_exception", "ignore_and_continue",
    "warn_and_continue", "ignore_and_stop", "warn_and_stop",
    "default_collation_fn", "imagehandler", "handle_extension",
    "basichandlers", "pytorch_worker_info", "batched", "unbatched",
    "shuffle", "decode", "to_tuple", "map_dict", "map_tuple", "rename",
    "select"))


def __getattr__(name):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'wds' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value
