"""The peers of scripts/bench-peers.sh: one measurement per run, one JSON line.

Usage: python peers.py KIND SHARD... [--workers W] [--warmup-epochs K]
       [--epochs E] [--batch-size B] [--shuffle-buffer N] [--index-dir DIR]

KIND
  torch-wds   torch DataLoader over Python webdataset, as webdataset's docs
              show it: WebDataset(urls).decode("pil").to_tuple("jpg", "cls")
              .map_tuple(preprocess, int), DataLoader(num_workers=W,
              batch_size=B, persistent_workers=True). preprocess: resize the
              shorter side to 224 (PIL bilinear, antialiased), center crop
              224x224, a uint8 HWC tensor (what wds's jpg:rgb:224 makes).
              With --device DEV (e.g. cuda): pin_memory=True, and each
              batch's tensors copied with .to(DEV, non_blocking=True), as
              torch's docs show it (timed to a torch.cuda.synchronize()).
  dali-jpeg   NVIDIA DALI's CPU pipeline (device_id=None, num_threads=W):
              fn.readers.webdataset + fn.decoders.image(device="cpu", RGB) +
              fn.resize(resize_shorter=224) + fn.crop(224x224, centered).
  dali-raw    fn.readers.webdataset alone, ext "bin" (the raw bytes of each
              sample), random_shuffle with initial_fill = --shuffle-buffer
              (as `wds bench --shuffle-buffer`), num_threads=W.

Each KIND runs --warmup-epochs epochs untimed (worker start-up, DALI's index
of the shards, the page cache), then --epochs epochs timed; the consumer
takes every batch's arrays (a tensor or a numpy array of the images and the
classes). An epoch is the number of whole batches in the shards (DALI's
reader wraps around; the DataLoader's last, short batch is counted as its
rows). Prints {"kind", "workers", "samples", "seconds", "samples_per_s"}.
"""

import argparse
import json
import sys
import time


def count_samples(shards, ext):
    """Samples with member .ext in the shards (tar headers only)."""
    import tarfile

    n = 0
    for s in shards:
        with tarfile.open(s) as t:
            n += sum(1 for m in t if m.name.endswith("." + ext))
    return n


def torch_wds(a):
    import numpy as np
    import torch
    import webdataset as wd
    from PIL import Image

    size = 224

    def preprocess(img):
        w, h = img.size
        s = size / min(w, h)
        nw, nh = max(size, round(w * s)), max(size, round(h * s))
        img = img.resize((nw, nh), Image.BILINEAR)
        x, y = (nw - size) // 2, (nh - size) // 2
        img = img.crop((x, y, x + size, y + size))
        return torch.from_numpy(np.array(img))  # as PILToTensor: a copy

    ds = (wd.WebDataset(a.shards, shardshuffle=False, empty_check=False)
          .decode("pil").to_tuple("jpg", "cls").map_tuple(preprocess, int))
    dev = a.device
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size,
                                         num_workers=a.workers,
                                         persistent_workers=True,
                                         pin_memory=dev is not None)

    def epoch():
        n = 0
        for img, cls in loader:
            assert img.shape[1:] == (size, size, 3) and img.dtype == torch.uint8
            if dev is not None:
                img = img.to(dev, non_blocking=True)
                cls = cls.to(dev, non_blocking=True)
            n += len(cls)
        if dev is not None:
            torch.cuda.synchronize()
        return n

    return run_epochs(a, epoch)


def dali_index(a):
    """index_paths for fn.readers.webdataset, or {} to let it index."""
    if not a.index_dir:
        return {}
    import os

    return {"index_paths": [os.path.join(a.index_dir, os.path.basename(s)[:-4] + ".idx")
                            for s in a.shards]}


def dali_pipe(a, build):
    from nvidia.dali import pipeline_def

    @pipeline_def(batch_size=a.batch_size, num_threads=a.workers,
                  device_id=None, prefetch_queue_depth=2, seed=1)
    def pipe():
        return build()

    p = pipe()
    p.build()
    return p


def dali_epochs(a, p, samples):
    per_epoch = samples // a.batch_size

    def epoch():
        for _ in range(per_epoch):
            outs = p.run()
            for o in outs:
                o.as_array()  # the dense batch, as the consumer takes it
        return per_epoch * a.batch_size

    return run_epochs(a, epoch)


def dali_jpeg(a):
    import nvidia.dali.fn as fn
    import nvidia.dali.types as types

    def build():
        jpg, cls = fn.readers.webdataset(paths=a.shards, ext=["jpg", "cls"],
                                         missing_component_behavior="error",
                                         name="r", **dali_index(a))
        img = fn.decoders.image(jpg, device="cpu", output_type=types.RGB)
        img = fn.resize(img, resize_shorter=224)
        img = fn.crop(img, crop=(224, 224))
        return img, cls

    return dali_epochs(a, dali_pipe(a, build), count_samples(a.shards, "jpg"))


def dali_raw(a):
    import nvidia.dali.fn as fn

    def build():
        kw = dali_index(a)
        if a.shuffle_buffer:
            kw.update(random_shuffle=True, initial_fill=a.shuffle_buffer)
        raw = fn.readers.webdataset(paths=a.shards, ext=["bin"],
                                    missing_component_behavior="error",
                                    name="r", **kw)
        return raw if isinstance(raw, (list, tuple)) else (raw,)

    return dali_epochs(a, dali_pipe(a, build), count_samples(a.shards, "bin"))


def run_epochs(a, epoch):
    for _ in range(a.warmup_epochs):
        epoch()
    t0 = time.perf_counter()
    n = sum(epoch() for _ in range(a.epochs))
    return n, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=("torch-wds", "dali-jpeg", "dali-raw"))
    ap.add_argument("shards", nargs="+")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--warmup-epochs", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--shuffle-buffer", type=int, default=0)
    ap.add_argument("--device", help="torch-wds: copy each batch to DEV")
    ap.add_argument("--index-dir", help="DALI: the shards' indexes (wds2idx), "
                    "DIR/NAME.idx for NAME.tar; without it DALI indexes them")
    a = ap.parse_args()
    fn = {"torch-wds": torch_wds, "dali-jpeg": dali_jpeg, "dali-raw": dali_raw}
    n, secs = fn[a.kind](a)
    json.dump({"kind": a.kind, "workers": a.workers, "samples": n,
               "seconds": round(secs, 6), "samples_per_s": round(n / secs, 1)},
              sys.stdout)
    print()


if __name__ == "__main__":
    main()
