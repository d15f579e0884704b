"""The driver of scripts/bench-dataset.sh: a torchvision v2 training pipeline
(RandomResizedCrop 224 with scale (0.2, 1), flip, ColorJitter, Normalize) and
a caption tokenizer run in DataLoader(num_workers=W) workers, batch 64, fed
three ways from the same shards of 256x256 photo-like JPEGs:

  wds.Dataset      the C loader reads and decodes ("jpg:rgb:256": the
                   image at its own size), the transforms in the workers
  wds.WebDataset   wds's C tar reader, webdataset's decode (PIL) and verbs
  webdataset       Python webdataset: WebDataset + WebLoader

Prints one line per way and pass: "NAME pass P: N images in S s: R images/s".
Usage: python dataset_pipeline.py SPEC INDEX WORKERS PASSES"""
import re
import sys
import time
import zlib

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
        return self.t(sample["jpg"]), tokenize(sample["txt"]), sample["cls"]


def run(name, loader, passes, set_epoch=None):
    for p in range(passes):
        if set_epoch:
            set_epoch(p)
        t0 = time.perf_counter()
        n = 0
        for x, tok, y in loader:
            assert tuple(x.shape[1:]) == (3, 224, 224) and x.dtype == torch.float32
            n += x.shape[0]
        dt = time.perf_counter() - t0
        print(f"{name} pass {p}: {n} images in {dt:.2f} s: {n / dt:.1f} images/s", flush=True)


def main():
    spec, index, workers, passes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    torch.set_num_threads(1)
    from torch.utils.data import DataLoader

    ds = wds.Dataset(spec, "jpg:rgb:256,txt,cls", index=index, rank=0, world_size=1).map(Pipe())
    run("wds.Dataset", DataLoader(ds, batch_size=BATCH, num_workers=workers), passes,
        ds.set_epoch)

    def keyed(s):
        return {"jpg": s["jpg"], "txt": s["txt"], "cls": s["cls"]}

    wd = (wds.WebDataset(spec, shardshuffle=False, workersplitter=wds.split_by_worker)
          .decode("torchrgb8").map(keyed).map(Pipe()).batched(BATCH, partial=True))
    run("wds.WebDataset", wds.WebLoader(wd, batch_size=None, num_workers=workers), passes)

    import webdataset

    ref = (webdataset.WebDataset(spec, shardshuffle=False, empty_check=False)
           .decode("torchrgb8").map(keyed).map(Pipe()).batched(BATCH, partial=True))
    run("webdataset", webdataset.WebLoader(ref, batch_size=None, num_workers=workers), passes)


if __name__ == "__main__":
    main()
