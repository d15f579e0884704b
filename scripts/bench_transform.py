#!/usr/bin/env python3
"""Images/s of wds.Loader(transform=fn) against the other places fn can run.

fn is torchvision v2's RandomResizedCrop(224) + RandomHorizontalFlip +
ColorJitter(0.4, 0.4, 0.4, 0.1) + Normalize on a 256x256 image the C loader
decoded (uint8 HWC; numpy work of the same kind when torch is missing).
Configurations, each over the same generated shards, batch 64:

  process-N   wds.Loader(transform=fn, transform_workers=N): the pool
  consumer    transform_workers=0: fn in the consuming thread (baseline)
  threads-N   plain wds.Loader batches, fn per row in a ThreadPoolExecutor
              of N threads (GIL-bound), stacked into a batch
  dataset-N   wds.Dataset(...).map(fn) + DataLoader(num_workers=N)

Usage: bench_transform.py [--images 2048] [--dir DIR] [--workers 1,2]
       [--only NAME,...] [--fn torchvision|python|sleep]
DIR (default /tmp/wds-bench-transform) keeps the shards between runs.
--fn python: a pure-Python loop and a crop in place of torchvision's
pipeline; --fn sleep: 10 ms asleep and a crop (the pool's overlap alone).
Prints one line per configuration: name, images/s (wall), and the CPU
time per image of this process and its children (the workers, joined when
the loader closes): on a shared machine the wall rate follows the load, the
CPU per image is the configuration's own cost.
"""

import argparse
import concurrent.futures
import io
import os
import sys
import time

import numpy as np

try:
    import torch
    from torchvision.transforms import v2

    torch.set_num_threads(1)
    _TV = v2.Compose([
        v2.RandomResizedCrop(224, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
except ImportError:  # pragma: no cover
    torch = None


def fn(sample):
    """The per-sample transform (module level: it pickles by reference)."""
    a = sample["jpg"]
    if torch is not None:
        x = _TV(torch.from_numpy(a).permute(2, 0, 1))
        return {"jpg": x, "cls": sample["cls"]}
    # numpy stand-in: a random crop, a flip, a brightness factor, normalise
    rng = np.random
    y0, x0 = rng.randint(0, 33), rng.randint(0, 33)
    c = a[y0:y0 + 224, x0:x0 + 224].astype(np.float32)
    if rng.rand() < 0.5:
        c = c[:, ::-1]
    c *= 0.6 + 0.8 * rng.rand()
    c = (c / 255 - 0.45) / 0.225
    return {"jpg": np.ascontiguousarray(c.transpose(2, 0, 1)),
            "cls": sample["cls"]}


def fn_python(sample):
    """A GIL-bound transform: pure-Python work (a tokenizer's or a PIL
    glue loop's kind, ~5 ms) and a crop."""
    acc = 0
    for i in range(60000):
        acc = (acc * 31 + i) & 0xFFFF
    a = sample["jpg"][16:240, 16:240]
    return {"jpg": np.ascontiguousarray(a), "cls": sample["cls"] + acc * 0}


def fn_sleep(sample):
    """No CPU: 10 ms of waiting (an I/O-bound fn); shows the pipeline's
    parallelism and overhead apart from the CPU the machine gives."""
    time.sleep(0.01)
    return {"jpg": np.ascontiguousarray(sample["jpg"][16:240, 16:240]),
            "cls": sample["cls"]}


def fn_tuple(sample):
    o = fn(sample)
    return o["jpg"], o["cls"]


def make_shards(d, n, per=256):
    import wds
    from PIL import Image

    os.makedirs(d, exist_ok=True)
    if os.path.exists(os.path.join(d, ".done")):
        return
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:256, 0:256]
    with wds.ShardWriter(os.path.join(d, "s-%03d.tar"), maxcount=per) as w:
        for i in range(n):
            # smooth gradients and blobs plus noise: photo-like JPEG sizes
            cx, cy = rng.integers(0, 256, 2)
            blob = 120 * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / 3000.0)
            a = np.stack([(x * (i % 5 + 1) + blob) % 256,
                          (y * 2 + blob + i) % 256,
                          (x + y + 2 * blob) % 256], -1)
            a = np.clip(a + rng.normal(0, 12, a.shape), 0, 255)
            b = io.BytesIO()
            Image.fromarray(a.astype(np.uint8)).save(b, "JPEG", quality=90)
            w.write({"__key__": f"{i:07d}", "jpg": b.getvalue(),
                     "cls": str(i % 1000).encode()})
    open(os.path.join(d, ".done"), "w").close()


def spec_of(d):
    n = len([f for f in os.listdir(d) if f.endswith(".tar")])
    return os.path.join(d, "s-{%03d..%03d}.tar" % (0, n - 1))


def run_loader(spec, n, **kw):
    import wds

    with wds.Loader(spec, "jpg:rgb:256,cls", 64, workers=2, **kw) as ld:
        it = iter(ld)
        next(it)  # start-up (workers, first batch) not counted
        pids = [p.pid for p in ld._tx.workers] if ld._tx else []
        t, c = time.perf_counter(), _cpu(pids)
        rows = 0
        for b in it:
            rows += b.rows
        return rows, time.perf_counter() - t, _cpu(pids) - c


def run_threads(spec, n, threads):
    import wds

    with wds.Loader(spec, "jpg:rgb:256,cls", 64, workers=2) as ld, \
            concurrent.futures.ThreadPoolExecutor(threads) as ex:
        t = None
        rows = 0
        for b in ld:
            imgs, cls = b["jpg"], b["cls"]
            outs = list(ex.map(lambda r: fn({"jpg": imgs[r],
                                             "cls": int(cls[r])}),
                               range(b.rows)))
            first = outs[0]["jpg"]
            stack = (np.stack([o["jpg"] for o in outs])
                     if isinstance(first, np.ndarray)
                     else torch.stack([o["jpg"] for o in outs]))
            del stack
            b.release()
            if t is None:
                t, c = time.perf_counter(), _cpu()
                continue
            rows += b.rows
        return rows, time.perf_counter() - t, _cpu() - c


def run_dataset(spec, n, workers):
    import wds
    from torch.utils.data import DataLoader

    ds = wds.Dataset(spec, "jpg:rgb:256,cls").map(fn_tuple)
    dl = DataLoader(ds, batch_size=64, num_workers=workers,
                    multiprocessing_context="forkserver" if workers else None)
    t = None
    rows = 0
    it = iter(dl)
    pids = [w.pid for w in getattr(it, "_workers", [])]
    for x, y in it:
        if t is None:
            t, c = time.perf_counter(), _cpu(pids)
            continue
        rows += len(y)
        last = _cpu(pids)  # the workers exit with the last batch
    return rows, time.perf_counter() - t, last - c


_SEEN = {}


def _cpu(pids=()):
    """CPU seconds of this process (all its threads) and of pids (a pid
    gone counts its last reading)."""
    t = time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                v = f.read().rsplit(")", 1)[1].split()
            _SEEN[p] = (int(v[11]) + int(v[12])) / tick
        except OSError:
            pass
        t += _SEEN.get(p, 0.0)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2048)
    ap.add_argument("--dir", default="/tmp/wds-bench-transform")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--only", default="")
    ap.add_argument("--fn", default="torchvision",
                    choices=("torchvision", "python", "sleep"))
    a = ap.parse_args()
    global fn
    if a.fn == "python":
        fn = fn_python
    elif a.fn == "sleep":
        fn = fn_sleep
    d = os.path.join(a.dir, str(a.images))
    make_shards(d, a.images)
    spec = spec_of(d)
    ws = [int(w) for w in a.workers.split(",")]
    confs = [("consumer", lambda: run_loader(spec, a.images,
                                             transform=fn,
                                             transform_workers=0))]
    for w in ws:
        confs.append((f"process-{w}", lambda w=w: run_loader(
            spec, a.images, transform=fn, transform_workers=w)))
        confs.append((f"threads-{w}", lambda w=w: run_threads(
            spec, a.images, w)))
        if torch is not None:
            confs.append((f"dataset-{w}", lambda w=w: run_dataset(
                spec, a.images, w)))
    only = set(x for x in a.only.split(",") if x)
    what = ("pure-Python loop + crop" if a.fn == "python" else
            "sleep 10 ms + crop" if a.fn == "sleep" else
            "torchvision v2 RRC224+flip+ColorJitter+Normalize" if torch
            else "numpy")
    print(f"# {a.images} 256x256 JPEGs, batch 64, fn: {what}"
          f", {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    for name, f in confs:
        if only and name not in only:
            continue
        rows, s, cpu = f()
        print(f"{name:12s} {rows / s:8.1f} images/s  ({rows} in {s:.2f} s)"
              f"  {1000 * cpu / rows:6.1f} CPU ms/image", flush=True)


if __name__ == "__main__":
    main()
