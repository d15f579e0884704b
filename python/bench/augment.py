"""The built-in augmentation against torchvision's (scripts/bench-augment.sh;
docs/performance.md, "Augmentation (issue 33)"). One measurement per run,
one JSON line.

Usage: python augment.py KIND SHARD... [--images N] [--workers W]
       [--batch-size B] [--epochs E]

The pipeline throughout is the issue's: RandomResizedCrop(224) (scale
(0.08, 1), ratio (3/4, 4/3)), a horizontal flip with probability 1/2,
ColorJitter(0.4, 0.4, 0.4, 0.1), then float32 CHW normalized with
ImageNet's mean and std.

KIND (per-image kinds run on one thread, torch.set_num_threads(1), timed
in the thread's CPU time, time.thread_time(), so that other processes on
a loaded machine do not count; wds's per-image figures come from
bench/augment_baseline.c, timed the same way)
  jitter-pil     ColorJitter alone on 224x224 PIL images (torchvision v2):
                 ms per image
  jitter-tensor  the same on uint8 CHW tensors: ms per image
  pipe-pil       the whole pipeline per image from the JPEG's bytes:
                 PIL.Image.open + convert("RGB"), then the v2 transforms on
                 the PIL image, ToImage, ToDtype(float32, scale=True),
                 Normalize: ms per image
  pipe-tensor    the same from torchvision.io.decode_jpeg on uint8 tensors
  loader-wds     samples/s of wds.Loader with that pipeline built in,
                 --workers worker threads, batches of --batch-size
  loader-webdataset
                 samples/s of webdataset's WebDataset(urls).decode("pil")
                 .to_tuple("jpg", "cls").map_tuple(the v2 pipeline, int)
                 .batched(B) in webdataset.WebLoader(batch_size=None,
                 num_workers=--workers), as webdataset's docs show it
Prints {"kind", "images", "seconds", "ms_per_image", "samples_per_s",
"cpu_ms_per_sample"}; the last, for the loader kinds only, is the CPU time
(user + system) of the timed epoch per sample, of the process and, for
webdataset, its DataLoader's worker processes: a loaded machine moves it
less than the wall time.
"""

import argparse
import io
import json
import os
import sys
import tarfile
import time

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
JITTER = dict(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)


def jpegs(shards, n):
    out = []
    for s in shards:
        with tarfile.open(s) as t:
            for m in t:
                if m.name.endswith(".jpg"):
                    out.append(t.extractfile(m).read())
                    if len(out) == n:
                        return out
    return out


def v2_pipeline():
    """The issue's pipeline, torchvision v2, on a PIL image or a uint8 CHW
    tensor."""
    import torch
    from torchvision.transforms import v2

    return v2.Compose([
        v2.RandomResizedCrop(224, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ColorJitter(**JITTER),
        v2.ToImage(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD)])


def per_image(kind, shards, n):
    import torch
    from PIL import Image
    from torchvision.transforms import v2

    torch.set_num_threads(1)
    data = jpegs(shards, n)
    if kind.startswith("jitter"):
        crop = v2.Compose([v2.RandomResizedCrop(224, antialias=True)])
        pil = [crop(Image.open(io.BytesIO(b)).convert("RGB")) for b in data]
        items = pil if kind == "jitter-pil" else [v2.functional.pil_to_tensor(p)
                                                  for p in pil]
        cj = v2.ColorJitter(**JITTER)
        for x in items[:20]:
            cj(x)
        t0 = time.thread_time()
        for x in items:
            cj(x)
        return time.thread_time() - t0, len(items)
    pipe = v2_pipeline()
    if kind == "pipe-pil":
        def one(b):
            return pipe(Image.open(io.BytesIO(b)).convert("RGB"))
    else:
        from torchvision.io import decode_jpeg

        def one(b):
            return pipe(decode_jpeg(torch.frombuffer(bytearray(b),
                                                     dtype=torch.uint8)))
    for b in data[:20]:
        one(b)
    t0 = time.thread_time()
    for b in data:
        one(b)
    return time.thread_time() - t0, len(data)


def proc_cpu(pid):
    """User + system CPU seconds of process pid (all its threads) so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wds_spec(shards):
    return "::".join(shards)


def wds_epoch(spec, batch, workers, **kw):
    import numpy as np
    import wds

    with wds.Loader(spec, "jpg:rgb:224,cls", batch, mode="plain",
                    workers=workers, crop="random", **kw) as lo:
        for _ in lo:  # warm-up epoch: threads, page cache
            pass
        c0 = proc_cpu(os.getpid())
        t0 = time.perf_counter()
        n = 0
        for b in lo:
            np.asarray(b["jpg"])
            np.asarray(b["cls"])
            n += b.rows
        sec = time.perf_counter() - t0
        cpu = proc_cpu(os.getpid()) - c0
        st = lo.stats()
    return sec, n, st, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind")
    ap.add_argument("shards", nargs="+")
    ap.add_argument("--images", type=int, default=500)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=1)
    a = ap.parse_args()
    k = a.kind
    cpu = None
    norm = dict(image_dtype="float32", normalize_mean=MEAN, normalize_std=STD)
    if k in ("jitter-pil", "jitter-tensor", "pipe-pil", "pipe-tensor"):
        sec, n = per_image(k, a.shards, a.images)
    elif k == "loader-wds":
        sec, n, _, cpu = wds_epoch(wds_spec(a.shards), a.batch_size, a.workers,
                              **JITTER, **norm)
    elif k == "loader-webdataset":
        import webdataset

        pipe = v2_pipeline()
        ds = (webdataset.WebDataset(a.shards, shardshuffle=False)
              .decode("pil").to_tuple("jpg", "cls")
              .map_tuple(pipe, int).batched(a.batch_size))
        dl = webdataset.WebLoader(ds, batch_size=None, num_workers=a.workers,
                                  persistent_workers=True)
        for _ in dl:  # warm-up epoch
            pass
        # persistent_workers: the same worker processes serve the next
        # epoch; WebLoader is a DataPipeline around the DataLoader
        torch_dl = dl.pipeline[0]
        pids = [os.getpid()] + [w.pid for w in torch_dl._iterator._workers]
        c0 = sum(proc_cpu(p) for p in pids)
        t0 = time.perf_counter()
        n = 0
        for x, y in dl:
            n += len(y)
        sec = time.perf_counter() - t0
        cpu = sum(proc_cpu(p) for p in pids) - c0
    else:
        sys.exit(f"augment.py: unknown kind {k}")
    print(json.dumps({"kind": k, "images": n, "seconds": round(sec, 4),
                      "ms_per_image": round(sec / n * 1e3, 4),
                      "samples_per_s": round(n / sec, 1),
                      "cpu_ms_per_sample": None if cpu is None else round(cpu / n * 1e3, 3)}))


if __name__ == "__main__":
    main()
