"""Pixel agreement of the GPU JPEG decoder (scripts/gpu-run.sh's `pixels`
step): the same photos decoded by

  gpu   wds.Loader(jpeg_decode="gpu", device="cuda"): nvJPEG and the
        resize kernel,
  cpu   wds.Loader (the CPU path: TurboJPEG and the CPU resampler),
  tv    torchvision.io.decode_jpeg(device="cuda") (nvJPEG through
        torchvision), resized with torchvision's antialiased bilinear resize
        and center-cropped (the reference decoders' use),

at the photos' own size (500x375: no resize, the decoders alone) and at
224 (shorter side resized, center crop: the training input), compared
image by image: mean and largest absolute difference per value (0..255).
Prints a table and one JSON line; exits 1 when the GPU path is further
from the CPU path than MAX_MEAN (3.0, the Python test's bound, measured
against a TurboJPEG stand-in: this step's figures are what sets the real
one) or an image differs grossly (mean > 20: a wrong image or a race).

Usage: python pixels.py TAR... [--count N] [--device cpu]
  --device cpu: no GPU; compares the CPU path with torchvision's CPU decode
  only (a check of this script on a machine without a GPU).
"""

import argparse
import io
import json
import sys
import tarfile

MAX_MEAN = 3.0
GROSS = 20.0


def read_tars(tars, count):
    """{key: JPEG bytes} of the first count JPEGs."""
    out = {}
    for path in tars:
        with tarfile.open(path) as t:
            for m in t:
                if m.name.endswith(".jpg"):
                    out[m.name[:-4]] = t.extractfile(m).read()
                    if len(out) >= count:
                        return out
    return out


def wds_decode(tars, size, count, gpu):
    """{key: HxWx3 uint8 numpy} from wds.Loader, center crop."""
    import numpy as np

    import wds

    kw = dict(workers=2, crop="center", shard_shuffle=False,
              shuffle_buffer=0)
    if gpu:
        kw.update(device="cuda", jpeg_decode="gpu")
    out = {}
    with wds.Loader(list(tars), f"jpg:rgb:{size},cls", 32, **kw) as l:
        for b in l:
            imgs = b["jpg"]
            imgs = imgs.cpu().numpy() if hasattr(imgs, "cpu") else np.asarray(imgs)
            for k, img, ok in zip(b.keys, imgs, b.valid):
                if bool(ok):
                    out[k] = img.copy()
            if len(out) >= count:
                break
    return out


def tv_decode(datas, size, dev):
    """{key: HxWx3 uint8 numpy}: torchvision's decode (on dev), resize of
    the shorter side to the crop's cover (antialiased bilinear) and a center
    crop, as torchvision users do."""
    import torch
    import torchvision
    from torchvision.transforms.v2 import functional as F

    w, h = (int(v) for v in size.split("x")) if "x" in size else (int(size),) * 2
    keys = list(datas)
    enc = [torch.frombuffer(bytearray(datas[k]), dtype=torch.uint8) for k in keys]
    out = {}
    for i in range(0, len(keys), 64):
        imgs = torchvision.io.decode_jpeg(enc[i:i + 64], device=dev,
                                          mode=torchvision.io.ImageReadMode.RGB)
        for k, img in zip(keys[i:i + 64], imgs):
            ih, iw = img.shape[1:]
            s = max(w / iw, h / ih)
            nh, nw = max(h, round(ih * s)), max(w, round(iw * s))
            if (nh, nw) != (ih, iw):
                img = F.resize(img, [nh, nw], antialias=True)
            img = F.center_crop(img, [h, w])
            out[k] = img.permute(1, 2, 0).cpu().numpy()
    return out


def compare(a, b):
    """(images, mean of the per-image mean differences, worst image's mean,
    largest value difference) over the keys both have."""
    import numpy as np

    keys = sorted(set(a) & set(b))
    means, worst = [], 0
    for k in keys:
        if a[k].shape != b[k].shape:
            raise SystemExit(f"pixels.py: {k}: shapes {a[k].shape} and {b[k].shape}")
        d = np.abs(a[k].astype(np.int16) - b[k].astype(np.int16))
        means.append(float(d.mean()))
        worst = max(worst, int(d.max()))
    if not keys:
        return 0, None, None, None
    return len(keys), sum(means) / len(means), max(means), worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tars", nargs="+")
    ap.add_argument("--count", type=int, default=256)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    a = ap.parse_args()
    gpu = a.device == "cuda"
    if gpu:
        import torch

        if not torch.cuda.is_available():
            print("pixels.py: no CUDA GPU")
            return 77
    datas = read_tars(a.tars, a.count)
    rows, failed = [], []
    for size in ("500x375", "224"):
        got = {"cpu": wds_decode(a.tars, size, a.count, False),
               "tv": tv_decode(datas, size, a.device)}
        if gpu:
            got["gpu"] = wds_decode(a.tars, size, a.count, True)
        pairs = [("gpu", "cpu"), ("gpu", "tv"), ("cpu", "tv")] if gpu else [("cpu", "tv")]
        for x, y in pairs:
            n, mean, worst_mean, maxd = compare(got[x], got[y])
            rows.append({"size": size, "a": x, "b": y, "images": n,
                         "mean": mean, "worst_image_mean": worst_mean,
                         "max": maxd})
            if n == 0:
                failed.append(f"{size} {x}/{y}: no image in common")
            elif worst_mean > GROSS:
                failed.append(f"{size} {x}/{y}: an image differs by {worst_mean:.1f} on average")
            elif (x, y) == ("gpu", "cpu") and mean > MAX_MEAN:
                failed.append(f"{size} gpu/cpu: mean {mean:.2f} > {MAX_MEAN}")
    print(f"{'size':8} {'pair':8} {'images':>6} {'mean':>7} {'worst':>7} {'max':>4}")
    for r in rows:
        if r["images"]:
            print(f"{r['size']:8} {r['a'] + '/' + r['b']:8} {r['images']:6d} "
                  f"{r['mean']:7.3f} {r['worst_image_mean']:7.3f} {r['max']:4d}")
    json.dump({"pixels": rows, "failed": failed}, sys.stdout)
    print()
    for f in failed:
        print("pixels.py: FAIL " + f)
    gc = [r for r in rows if (r["a"], r["b"]) == ("gpu", "cpu") and r["images"]]
    summary = "; ".join(f"{r['size']} gpu/cpu mean {r['mean']:.2f} max {r['max']}"
                        for r in gc) or "; ".join(
        f"{r['size']} {r['a']}/{r['b']} mean {r['mean']:.2f}" for r in rows if r["images"])
    print(("FAILED: " if failed else "") + summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
