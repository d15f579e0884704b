#!/usr/bin/env python3
"""Writes a small real image data set as files for `wds write`.

The handwritten digits that ship with scikit-learn (1,797 8x8 images of the
digits 0-9, from UCI's optdigits) when python3-sklearn is installed;
otherwise a generated learnable set of the same shape (each class a
distinct stroke pattern plus noise). Images are written as 8-bit gray PNGs
(the 0..16 intensities scaled to 0..255), labels as .cls text:

    OUT/train/00000.png  OUT/train/00000.cls  ...   (80%, deterministic split)
    OUT/eval/00007.png   OUT/eval/00007.cls   ...   (20%)

Usage: make-digits.py OUT [--seed S]. Prints which source was used.
"""
import argparse
import os
import random
import struct
import zlib


def png_gray(pixels, width, height):
    """An 8-bit grayscale PNG, written with zlib only (no PIL needed)."""
    raw = b"".join(b"\x00" + bytes(pixels[y * width:(y + 1) * width])
                   for y in range(height))

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    return (b"\x89PNG\r\n\x1a\n" +
            chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def sklearn_digits():
    from sklearn.datasets import load_digits  # python3-sklearn
    d = load_digits()
    images = [[int(round(v * 255 / 16)) for v in img.ravel()] for img in d.images]
    return images, [int(t) for t in d.target], "scikit-learn digits (UCI optdigits)"


def generated_digits(seed):
    rng = random.Random(seed)
    images, labels = [], []
    for i in range(1800):
        c = i % 10
        img = [0] * 64
        # Class c: a bar at row/column position c % 8, direction by c // 8,
        # plus a second mark whose position also depends on c.
        for k in range(8):
            r, col = (c % 8, k) if c < 8 else (k, (c * 3) % 8)
            img[r * 8 + col] = 200
        img[((c * 5) % 8) * 8 + (c * 7) % 8] = 255
        img = [max(0, min(255, v + rng.randint(-40, 40))) for v in img]
        images.append(img)
        labels.append(c)
    return images, labels, "generated learnable set (scikit-learn not installed)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    try:
        images, labels, source = sklearn_digits()
    except ImportError:
        images, labels, source = generated_digits(args.seed)
    order = list(range(len(images)))
    random.Random(args.seed).shuffle(order)
    n_eval = len(order) // 5
    for split, idx in (("eval", order[:n_eval]), ("train", order[n_eval:])):
        d = os.path.join(args.out, split)
        os.makedirs(d, exist_ok=True)
        for i in idx:
            with open(os.path.join(d, f"{i:05d}.png"), "wb") as f:
                f.write(png_gray(images[i], 8, 8))
            with open(os.path.join(d, f"{i:05d}.cls"), "w") as f:
                f.write(str(labels[i]))
    print(f"{source}: {len(order) - n_eval} train, {n_eval} eval images in {args.out}")


if __name__ == "__main__":
    main()
