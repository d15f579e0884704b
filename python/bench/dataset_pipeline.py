"""The driver of scripts/bench-dataset.sh: a torchvision v2 training pipeline
(RandomResizedCrop 224 with scale (0.2, 1), flip, ColorJitter, Normalize) and
a caption tokenizer run in DataLoader(num_workers=W) workers, batch 64, fed
three ways from the same shards of 256x256 photo-like JPEGs:

  wds.Dataset      the C loader reads and decodes ("jpg:rgb:256": the
                   image at its own size), the transforms in the workers
  wds.WebDataset   wds's C tar reader, webdataset's decode (PIL) and verbs
  webdataset       Python webdataset: WebDataset + WebLoader

With MODE "captions" the images are left out: each way reads the txt and cls
fields only and tokenizes the caption in the workers (wds.Dataset's C loader
skips the JPEG members; both webdatasets read them and leave them undecoded,
as a caption-only pipeline over these shards does).

The ways alternate pass by pass. Prints one line per way and pass: "NAME
pass P: N images in S s: R images/s, cpu C ms/image" (N samples with MODE
captions; C: the CPU time, user + system, of the main process and the
DataLoader's workers per image, which a loaded machine moves less than the
wall time).
Usage: python dataset_pipeline.py SPEC INDEX WORKERS PASSES [images|captions]"""
import re
import resource
import sys
import time
import zlib

import numpy as np
import torch
from torchvision.transforms import v2

import wds

BATCH = 64


def tokenize(text):
    ids = [1 + zlib.crc32(w.encode()) % 4095 for w in re.findall(r"\w+", text.lower())][:16]
    return torch.tensor(ids + [0] * (16 - len(ids)), dtype=torch.int64)


class Pipe:
    def __init__(self):
        self.t = v2.Compose([
            v2.ToImage(),
            v2.RandomResizedCrop(224, scale=(0.2, 1.0), antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ])

    def __call__(self, sample):  # a dict with jpg (HWC array or CHW tensor), txt, cls
        img = sample["jpg"]
        if isinstance(img, np.ndarray):
            # wds.Dataset's HWC uint8 array as the CHW view of the same memory,
            # the form webdataset's "torchrgb8" hands over: v2.ToImage would
            # copy it into a contiguous CHW tensor, and the pipeline costs
            # about 4% more CPU on that (median of 7 interleaved rounds).
            img = torch.from_numpy(img).permute(2, 0, 1)
        return self.t(img), tokenize(sample["txt"]), sample["cls"]


class Captions:
    def __call__(self, sample):  # a dict with txt (str) and cls
        return tokenize(sample["txt"]), sample["cls"]


def cpu_seconds():
    """User + system CPU seconds of this process and its reaped children (the
    DataLoader's workers are reaped at the end of each pass)."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


def one_pass(name, loader, p, set_epoch=None):
    if set_epoch:
        set_epoch(p)
    c0 = cpu_seconds()
    t0 = time.perf_counter()
    n = 0
    for b in loader:
        if len(b) == 3:
            x, tok, y = b
            assert tuple(x.shape[1:]) == (3, 224, 224) and x.dtype == torch.float32
        else:
            tok, y = b
        assert tuple(tok.shape[1:]) == (16,) and len(y) == tok.shape[0]
        n += tok.shape[0]
    dt = time.perf_counter() - t0
    cpu = cpu_seconds() - c0
    print(f"{name} pass {p}: {n} images in {dt:.2f} s: {n / dt:.1f} images/s, "
          f"cpu {cpu / n * 1e3:.2f} ms/image", flush=True)


def run(ways, passes):
    """ways: [(name, loader, set_epoch)]; the ways alternate pass by pass, so
    that a change of the machine's load hits every way alike."""
    for p in range(passes):
        for name, loader, set_epoch in ways:
            one_pass(name, loader, p, set_epoch)


def main():
    spec, index, workers, passes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    mode = sys.argv[5] if len(sys.argv) > 5 else "images"
    if mode not in ("images", "captions"):
        sys.exit(f"dataset_pipeline.py: MODE is images or captions, not {mode!r}")
    torch.set_num_threads(1)
    from torch.utils.data import DataLoader

    if mode == "captions":
        return captions(spec, index, workers, passes, DataLoader)
    ds = wds.Dataset(spec, "jpg:rgb:256,txt,cls", index=index, rank=0, world_size=1).map(Pipe())

    def keyed(s):
        return {"jpg": s["jpg"], "txt": s["txt"], "cls": s["cls"]}

    wd = (wds.WebDataset(spec, shardshuffle=False, workersplitter=wds.split_by_worker)
          .decode("torchrgb8").map(keyed).map(Pipe()).batched(BATCH, partial=True))

    import webdataset

    ref = (webdataset.WebDataset(spec, shardshuffle=False, empty_check=False)
           .decode("torchrgb8").map(keyed).map(Pipe()).batched(BATCH, partial=True))
    run([("wds.Dataset", DataLoader(ds, batch_size=BATCH, num_workers=workers), ds.set_epoch),
         ("wds.WebDataset", wds.WebLoader(wd, batch_size=None, num_workers=workers), None),
         ("webdataset", webdataset.WebLoader(ref, batch_size=None, num_workers=workers), None)],
        passes)


def captions(spec, index, workers, passes, DataLoader):
    ds = wds.Dataset(spec, "txt,cls", index=index, rank=0, world_size=1).map(Captions())

    def keyed(s):
        return {"txt": s["txt"], "cls": s["cls"]}

    wd = (wds.WebDataset(spec, shardshuffle=False, workersplitter=wds.split_by_worker)
          .decode().map(keyed).map(Captions()).batched(BATCH, partial=True))

    import webdataset

    ref = (webdataset.WebDataset(spec, shardshuffle=False, empty_check=False)
           .decode().map(keyed).map(Captions()).batched(BATCH, partial=True))
    run([("wds.Dataset", DataLoader(ds, batch_size=BATCH, num_workers=workers), ds.set_epoch),
         ("wds.WebDataset", wds.WebLoader(wd, batch_size=None, num_workers=workers), None),
         ("webdataset", webdataset.WebLoader(ref, batch_size=None, num_workers=workers), None)],
        passes)


if __name__ == "__main__":
    main()
