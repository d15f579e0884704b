# train_shards.py OUT PREFIX SIZES SEED: the shards of the trainer tests (train.sh's
# generator): 16x16 gray PNGs, 10 classes (a bright 3x5 patch at a
# class-dependent place, jittered), SIZES comma-separated samples per shard.
import io, random, sys, tarfile
from PIL import Image
out, prefix, sizes, seed = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3].split(",")], int(sys.argv[4])
rng = random.Random(seed)
k = 0
for si, n in enumerate(sizes):
    with tarfile.open(f"{out}/{prefix}-{si:03d}.tar", "w", format=tarfile.USTAR_FORMAT) as tf:
        for _ in range(n):
            c = rng.randrange(10)
            px = [rng.randrange(0, 150) for _ in range(256)]
            cx, cy = 2 + (c % 5) * 3, 4 + (c // 5) * 7
            cx += rng.randrange(-1, 2); cy += rng.randrange(-1, 2)
            for y in range(cy - 2, cy + 3):
                for x in range(cx - 1, cx + 2):
                    px[y * 16 + x] = min(255, px[y * 16 + x] + 90)
            im = Image.new("L", (16, 16)); im.putdata(px)
            b = io.BytesIO(); im.save(b, "PNG"); data = b.getvalue()
            for ext, d in (("png", data), ("cls", str(c).encode())):
                ti = tarfile.TarInfo(f"s{seed}_{k:06d}.{ext}"); ti.size = len(d); ti.mtime = 0
                tf.addfile(ti, io.BytesIO(d))
            k += 1
