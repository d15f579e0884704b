#!/usr/bin/env python3
"""decode_ref.py TEST_DECODE WORKDIR — the field decoders against reference
decoders: Pillow (images, resize, color conversion), djpeg (full-size JPEG
decode) and numpy (.npy in every version, dtype, byte order and layout).

Fixtures and reference outputs are generated into WORKDIR and listed in
WORKDIR/manifest.txt; `TEST_DECODE --ref WORKDIR` decodes and compares
(mean and max absolute difference against stated tolerances). Then
`TEST_DECODE --save DIR` writes .npy files with wds_npy_save and numpy reads
them back. A missing Pillow, numpy or djpeg fails the test.

Tolerances (per output byte, 0..255):
  PNG, any size (same arithmetic as Pillow's resize)   max 1,  mean 0.02
  JPEG at its own size, RGB, vs Pillow and djpeg        max 1,  mean 0.02
  JPEG at its own size, L from YCbCr (Y plane vs
    Pillow's L of RGB; vs djpeg -grayscale exact)        max 3,  mean 0.6
  JPEG resized (DCT-scaled decode + resize vs full
    decode + Pillow resize; a few pixels on sharp edges
    differ by ~25)                                       max 32, mean 1.5
"""
import io
import os
import shutil
import struct
import subprocess
import sys
import zlib

try:
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter
except ImportError as exc:
    sys.exit(f"decode_ref.py: FAIL: needs numpy and Pillow ({exc}); "
             "install python3-numpy and python3-pil")

TOL_EXACT = (0.02, 1)
TOL_GRAY = (0.6, 3)
TOL_RESIZED = (1.5, 32)


def photo(rng, w, h):
    """A photo-like image: gradients, blurred shapes, mild noise."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    base = np.stack([x / w * 200 + 30, y / h * 180 + 40,
                     (x + y) / (w + h) * 150 + 60], axis=-1)
    img = Image.fromarray(base.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(12):
        x0, y0 = rng.integers(0, w), rng.integers(0, h)
        x1, y1 = x0 + rng.integers(10, w // 2), y0 + rng.integers(10, h // 2)
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse([x0, y0, x1, y1], fill=color)
        else:
            draw.rectangle([x0, y0, x1, y1], fill=color)
    img = img.filter(ImageFilter.GaussianBlur(3))
    arr = np.asarray(img).astype(np.float32)
    arr += rng.normal(0, 4, arr.shape)
    return arr.clip(0, 255).astype(np.uint8)


def center_plan(sw, sh, ow, oh):
    """torchvision Resize(shorter side) + CenterCrop, generalized to
    non-square outputs as decode.h documents."""
    if ow * sh >= oh * sw:
        rw, rh = ow, max(oh, ow * sh // sw)
    else:
        rw, rh = max(ow, oh * sw // sh), oh
    return rw, rh, int(round((rw - ow) / 2.0)), int(round((rh - oh) / 2.0))


def reference(img, ow, oh):
    """Pillow's resize of the whole image, then the crop."""
    rw, rh, left, top = center_plan(img.width, img.height, ow, oh)
    if (rw, rh) != img.size:
        img = img.resize((rw, rh), Image.BILINEAR)
    return np.asarray(img.crop((left, top, left + ow, top + oh)))


def png_chunk(kind, data):
    return (struct.pack(">I", len(data)) + kind + data +
            struct.pack(">I", zlib.crc32(kind + data) & 0xffffffff))


def raw_png(arr, color_type, depth, interlace=False):
    """A PNG written here (Pillow cannot write 16-bit RGB or interlaced)."""
    h, w = arr.shape[:2]
    dt = ">u2" if depth == 16 else "u1"
    arr = arr.astype(dt)

    def row_bytes(r):
        return _nibbles(r).tobytes() if depth == 4 else r.tobytes()

    def scanlines(a):
        return b"".join(b"\0" + row_bytes(a[y]) for y in range(a.shape[0]))
    if interlace:
        passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4),
                  (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]
        raw = b"".join(scanlines(arr[y0::dy, x0::dx])
                       for x0, y0, dx, dy in passes
                       if arr[y0::dy, x0::dx].size)
    else:
        raw = scanlines(arr)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0,
                       1 if interlace else 0)
    return (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) +
            png_chunk(b"IDAT", zlib.compress(raw)) + png_chunk(b"IEND", b""))


def read_pnm(data):
    """djpeg's P5/P6 output as an array."""
    parts, pos = [], 0
    while len(parts) < 4:
        while data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos)
            continue
        end = pos
        while not data[end:end + 1].isspace():
            end += 1
        parts.append(data[pos:end])
        pos = end
    w, h = int(parts[1]), int(parts[2])
    ch = 3 if parts[0] == b"P6" else 1
    return np.frombuffer(data[pos + 1:pos + 1 + w * h * ch],
                         np.uint8).reshape(h, w, ch).squeeze()


class Manifest:
    def __init__(self, root):
        self.root, self.lines = root, []

    def image(self, name, ref, ch, tol, tag):
        oh, ow = ref.shape[:2]
        refname = f"{name}.{tag}.{ow}x{oh}x{ch}.ref"
        with open(os.path.join(self.root, refname), "wb") as f:
            f.write(np.ascontiguousarray(ref, np.uint8).tobytes())
        self.lines.append(f"image {name} {ow} {oh} {ch} center {refname} "
                          f"{tol[0]} {tol[1]}")

    def write(self):
        with open(os.path.join(self.root, "manifest.txt"), "w") as f:
            f.write("\n".join(self.lines) + "\n")


def images(m, root, rng):
    jpegs = []
    base = photo(rng, 500, 375)
    for name, arr, kw in [
            ("photo420.jpg", base, {"subsampling": 2}),
            ("photo444.jpg", base, {"subsampling": 0}),
            ("portrait.jpg", photo(rng, 375, 500), {"subsampling": 2}),
            ("odd.jpg", photo(rng, 97, 61), {"subsampling": 2}),
            ("large.jpg", photo(rng, 1024, 768), {"subsampling": 2}),
            ("gray.jpg", photo(rng, 320, 240)[:, :, 1], {})]:
        Image.fromarray(arr).save(os.path.join(root, name), quality=90, **kw)
        jpegs.append(name)
    Image.fromarray(base).convert("CMYK").save(
        os.path.join(root, "cmyk.jpg"), quality=90)
    jpegs.append("cmyk.jpg")

    for name in jpegs:
        path = os.path.join(root, name)
        src = Image.open(path)
        w, h = src.size
        for ch, mode in ((3, "RGB"), (1, "L")):
            img = src.convert(mode)
            full = np.asarray(img)
            gray_from_color = ch == 1 and src.mode not in ("L",)
            m.image(name, full, ch, TOL_GRAY if gray_from_color else
                    TOL_EXACT, "pil")
            for ow, oh in ((224, 224), (64, 64), (100, 80)):
                m.image(name, reference(img, ow, oh), ch, TOL_RESIZED, "pil")
        if src.mode == "CMYK":
            continue  # djpeg writes CMYK as-is
        for ch, opts in ((3, []), (1, ["-grayscale"])):
            if ch == 3 and src.mode == "L":
                continue
            ppm = subprocess.run(["djpeg", "-pnm"] + opts + [path],
                                 check=True, capture_output=True).stdout
            m.image(name, read_pnm(ppm), ch, TOL_EXACT, "djpeg")

    pngs = {}
    rgb = photo(rng, 150, 110)
    pngs["rgb.png"] = (Image.fromarray(rgb), None)
    rgba = np.dstack([rgb, rng.integers(0, 256, rgb.shape[:2])]).astype(
        np.uint8)
    pngs["rgba.png"] = (Image.fromarray(rgba, "RGBA"), None)
    pngs["l.png"] = (Image.fromarray(rgb[:, :, 0]), None)
    pngs["la.png"] = (Image.fromarray(rgba[:, :, ::3].copy(), "LA"), None)
    pal = Image.fromarray(rgb).quantize(32)
    pal.info["transparency"] = bytes([0, 255] * 16)
    pngs["p_trns.png"] = (pal, {"transparency": bytes([0, 255] * 16)})
    pngs["bit1.png"] = (Image.fromarray(rgb[:, :, 1] > 128), None)
    for name, (img, kw) in pngs.items():
        img.save(os.path.join(root, name), **(kw or {}))
    # written here: 16-bit RGB, 16-bit gray, 4-bit gray, interlaced RGB+A
    rgb16 = rng.integers(0, 65536, (90, 70, 3))
    gray16 = rng.integers(0, 65536, (45, 77))
    gray4 = rng.integers(0, 16, (33, 50))
    raws = {
        "rgb16.png": (raw_png(rgb16, 2, 16), rgb16 >> 8),
        "gray16.png": (raw_png(gray16, 0, 16), gray16 >> 8),
        "gray4.png": (raw_png(gray4, 0, 4, interlace=True), gray4 * 17),
        "interlaced.png": (raw_png(rgba, 6, 8, interlace=True), rgb),
        "interlaced16.png": (raw_png(rgb16, 2, 16, interlace=True),
                             rgb16 >> 8),
    }
    for name, (data, want) in raws.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        pngs[name] = (Image.fromarray(want.astype(np.uint8)), None)
        # Pillow reads these too (16-bit gray as mode I, which convert()
        # clips instead of scaling: the array above is the reference)
    for name, (img, _) in pngs.items():
        if name not in raws:
            img = Image.open(os.path.join(root, name))
        for ch, mode in ((3, "RGB"), (1, "L")):
            conv = img.convert(mode)
            m.image(name, np.asarray(conv), ch, TOL_EXACT, "pil")
            for ow, oh in ((64, 64), (100, 80), (224, 224)):
                m.image(name, reference(conv, ow, oh), ch, TOL_EXACT, "pil")


def _nibbles(row):
    """4-bit samples packed two to a byte (the row padded to even)."""
    r = np.asarray(row, np.uint8)
    if len(r) % 2:
        r = np.concatenate([r, np.zeros(1, np.uint8)])
    return (r[0::2] << 4) | r[1::2]


def corrupt(m, root, rng):
    with open(os.path.join(root, "photo420.jpg"), "rb") as f:
        jpg = f.read()
    with open(os.path.join(root, "rgb.png"), "rb") as f:
        png = f.read()
    sos = jpg.index(b"\xff\xda")
    idat = png.index(b"IDAT")
    idat_len = struct.unpack(">I", png[idat - 4:idat])[0]
    bad_crc = bytearray(png)
    bad_crc[idat + 4 + idat_len] ^= 0x55  # the CRC field itself
    cases = {
        "cut.jpg": (jpg[:len(jpg) // 2], "WDS_ERR_TRUNCATED"),
        "headers-only.jpg": (jpg[:sos], "WDS_ERR_FORMAT"),
        "soi-only.jpg": (jpg[:4], "WDS_ERR_TRUNCATED"),
        "bad-crc.png": (bytes(bad_crc), "WDS_ERR_FORMAT"),
        "cut.png": (png[:len(png) // 2], "WDS_ERR_TRUNCATED"),
        "signature.png": (png[:8], "WDS_ERR_TRUNCATED"),
        "random.bin": (rng.integers(0, 256, 1000).astype(np.uint8).tobytes(),
                       "WDS_ERR_FORMAT"),
        "empty.bin": (b"", "WDS_ERR_FORMAT"),
        "gif.bin": (b"GIF89a\x01\x00\x01\x00", "WDS_ERR_FORMAT"),
    }
    for name, (data, status) in cases.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        m.lines.append(f"error {name} {status}")


DTYPES = ["b1", "u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8", "f2", "f4",
          "f8"]  # in wds_dtype order, from WDS_DTYPE_BOOL = 1


def npys(m, root, rng):
    for ti, code in enumerate(DTYPES, start=1):
        orders = "|" if code[1] == "1" else "<>"
        for order in orders:
            dt = np.dtype(order + code)
            for shape in [(), (5,), (2, 3, 4), (3, 0)]:
                vals = rng.integers(0, 200, shape) - 50
                if code == "b1":
                    vals = vals > 0
                arr = vals.astype(dt)
                for fortran in (False, True):
                    if fortran and len(shape) < 2:
                        continue
                    a = np.asfortranarray(arr) if fortran else arr
                    for version in ((1, 0), (2, 0), (3, 0)):
                        name = "a_%s%s_%s_%s_v%d.npy" % (
                            "le" if order == "<" else "be" if order == ">"
                            else "na", code, "x".join(map(str, shape)) or
                            "scalar", "F" if fortran else "C", version[0])
                        with open(os.path.join(root, name), "wb") as f:
                            np.lib.format.write_array(f, a, version=version)
                        with open(os.path.join(root, name + ".bin"), "wb") as f:
                            f.write(np.ascontiguousarray(a).astype(
                                dt.newbyteorder("<")).tobytes())
                        m.lines.append("npy %s %d %d %s" % (
                            name, ti, len(shape), " ".join(map(str, shape))))


def check_saved(binary, root):
    out = os.path.join(root, "saved")
    os.makedirs(out, exist_ok=True)
    run = subprocess.run([binary, "--save", out], capture_output=True,
                         text=True)
    print(run.stdout, end="")
    if run.returncode != 0 or run.stderr:
        print(run.stderr)
        return 1
    pattern = np.array([(i * 131 + 7) & 0xff for i in range(192)], np.uint8)
    bools = np.array([i % 3 == 0 for i in range(192)], np.uint8)
    failed = 0
    for ti, code in enumerate(DTYPES, start=1):
        for s, shape in enumerate([(), (7,), (2, 3, 4)]):
            path = os.path.join(out, f"save_{ti}_{s}.npy")
            a = np.load(path)
            want_dt = np.dtype(("|" if code[1] == "1" else "<") + code)
            n = int(np.prod(shape)) * want_dt.itemsize
            src = bools if code == "b1" else pattern
            ok = (a.dtype == want_dt and a.shape == shape and
                  a.tobytes() == src[:n].tobytes() and
                  a.flags.c_contiguous)
            with open(path, "rb") as f:
                head = f.read(10)
            ok = ok and head[6:8] == b"\x01\x00" and \
                (10 + head[8] + 256 * head[9]) % 64 == 0
            if not ok:
                print(f"FAIL saved {path}: {a.dtype} {a.shape}")
                failed += 1
    print(f"wds_npy_save: {3 * len(DTYPES)} files read back by numpy, "
          f"{failed} failed")
    return failed


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: decode_ref.py TEST_DECODE WORKDIR")
    binary, root = sys.argv[1], sys.argv[2]
    if not shutil.which("djpeg"):
        sys.exit("decode_ref.py: FAIL: djpeg not found "
                 "(install libjpeg-turbo-progs)")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    rng = np.random.default_rng(20240601)
    m = Manifest(root)
    images(m, root, rng)
    corrupt(m, root, rng)
    npys(m, root, rng)
    m.write()
    run = subprocess.run([binary, "--ref", root], capture_output=True,
                         text=True)
    print(run.stdout, end="")
    status = run.returncode
    if run.stderr:
        print("FAIL: the decoders wrote to stderr:\n" + run.stderr)
        status = 1
    status |= check_saved(binary, root)
    print("decode_ref.py:", "FAIL" if status else "all passed")
    return 1 if status else 0


if __name__ == "__main__":
    sys.exit(main())
