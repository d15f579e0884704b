#!/usr/bin/env python3
"""gen-photo-jpegs.py DIR [--count N] [--seed S] [--width W] [--height H]
[--quality Q] — writes N photo-like JPEGs (default 2000 of 500x375 at
quality 90, 4:2:0) named 000000.jpg ... into DIR, a deterministic function
of the seed. Photo-like: smooth gradients, blurred random shapes and mild
noise, so files are sized like real photos (~30-80 KB), unlike flat
synthetic images. Needs numpy and Pillow (Debian: python3-numpy,
python3-pil; run with /usr/bin/python3)."""
import argparse
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def photo(rng, w, h):
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    a = rng.uniform(0.5, 1.5, 6)
    base = np.stack([x / w * 180 * a[0] + y / h * 40 * a[3] + 20,
                     y / h * 170 * a[1] + x / w * 30 * a[4] + 30,
                     (x + y) / (w + h) * 150 * a[2] + 50 * a[5]], axis=-1)
    img = Image.fromarray(base.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(15, 40))):
        x0, y0 = int(rng.integers(-w // 4, w)), int(rng.integers(-h // 4, h))
        x1 = x0 + int(rng.integers(8, w // 2))
        y1 = y0 + int(rng.integers(8, h // 2))
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        kind = rng.integers(0, 3)
        if kind == 0:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        elif kind == 1:
            draw.rectangle([x0, y0, x1, y1], fill=color)
        else:
            pts = [(int(rng.integers(0, w)), int(rng.integers(0, h)))
                   for _ in range(5)]
            draw.polygon(pts, fill=color)
    img = img.filter(ImageFilter.GaussianBlur(float(rng.uniform(1.0, 2.5))))
    arr = np.asarray(img).astype(np.float32)
    # texture: fine noise plus a blurred coarse noise layer
    coarse = Image.fromarray(rng.normal(128, 40, (h // 4, w // 4)).clip(
        0, 255).astype(np.uint8)).resize((w, h), Image.BICUBIC)
    arr += (np.asarray(coarse, np.float32)[:, :, None] - 128) * 0.3
    arr += rng.normal(0, 5, arr.shape)
    return arr.clip(0, 255).astype(np.uint8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--width", type=int, default=500)
    ap.add_argument("--height", type=int, default=375)
    ap.add_argument("--quality", type=int, default=90)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    total = 0
    for i in range(args.count):
        rng = np.random.default_rng([args.seed, i])
        img = Image.fromarray(photo(rng, args.width, args.height))
        path = os.path.join(args.dir, "%06d.jpg" % i)
        img.save(path, quality=args.quality, subsampling=2)
        total += os.path.getsize(path)
    print("%d JPEGs in %s, %.1f KB average" %
          (args.count, args.dir, total / max(args.count, 1) / 1024))


if __name__ == "__main__":
    main()
