"""The loader's built-in augmentation against torchvision's (v2): ColorJitter
with fixed factors on the same resized crop gives torchvision's pixels
within the measured tolerance below, the four adjustments in one of
torchvision's orders, Normalize's float32/float16 CHW rows, the flip
probability and the option errors.

The tolerance: wds computes each adjustment in torch's float32 steps (a
product, then a fused multiply-add as torch's vectorised add with alpha,
truncation to uint8), and on this machine (x86-64 with AVX2 and FMA,
torch 2.15, torchvision 0.29) the pixels are exactly torchvision's: 0
values differ over 64 photo-like 224x224 crops x 12 random factors per
adjustment (scripts/bench-augment.sh --measure). Where torch's kernels
round otherwise (a CPU without FMA: the blend's product rounded apart),
values within float32 rounding of a whole number truncate the other way:
up to 1.2% of the values by 1 in a numpy model of it. So the test allows
a difference of 1 in at most 2% of the values; Normalize is exact."""
import io
import itertools

import numpy as np
import pytest

import wds

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
from torchvision.transforms import v2  # noqa: E402
from torchvision.transforms.v2 import functional as F  # noqa: E402

# The measured tolerance: the largest difference of a value, and the share
# of values that differ at all.
TOL_MAX = 1
TOL_SHARE = 0.02


def photo(seed, w=96, h=80):
    """A photo-like JPEG: smooth color fields, an edge and some noise."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    c = rng.uniform(0, 255, size=(3, 3))
    img = np.stack([c[k, 0] + c[k, 1] * x / w + c[k, 2] * y / h
                    for k in range(3)], axis=-1) % 256
    img[: h // 2, : w // 3] = rng.uniform(0, 255, size=3)  # a flat patch
    img += rng.normal(0, 6, size=img.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(
        buf, format="JPEG", quality=90)
    return buf.getvalue()


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    d = tmp_path_factory.mktemp("augment")
    with wds.ShardWriter(str(d / "a-%03d.tar"), maxcount=6, sync=False) as w:
        for k in range(24):
            w.write({"__key__": f"k{k:03d}", "jpg": photo(k)})
    return str(d / "a-{000..003}.tar")


def images(spec, **kw):
    """Every image of the shard, in key order, with these options (a random
    crop of 64x48 by default: the crop is the same whatever the jitter)."""
    opts = dict(mode="plain", workers=2, seed=7, crop="random",
                crop_scale=(0.3, 1.0))
    opts.update(kw)
    out = {}
    with wds.Loader(spec, "jpg:64x48", 5, **opts) as lo:
        for b in lo:
            a = np.array(b["jpg"])
            for i, k in enumerate(b.sample_keys):
                out[k] = a[i].copy()
    return np.stack([out[k] for k in sorted(out)])


def chw(a):
    return torch.from_numpy(np.ascontiguousarray(a)).permute(0, 3, 1, 2)


def hwc(t):
    return t.permute(0, 2, 3, 1).numpy()


ADJUST = {"brightness": F.adjust_brightness, "contrast": F.adjust_contrast,
          "saturation": F.adjust_saturation, "hue": F.adjust_hue}


def diff(got, want):
    d = np.abs(got.astype(np.int16) - want.astype(np.int16))
    return int(d.max()), float((d > 0).mean())


@pytest.mark.parametrize("op,factor", [
    ("brightness", 0.55), ("brightness", 1.37), ("contrast", 0.3),
    ("contrast", 1.6), ("saturation", 0.0), ("saturation", 0.45),
    ("saturation", 1.8), ("hue", -0.37), ("hue", -0.05), ("hue", 0.25),
    ("hue", 0.5)])
def test_jitter_matches_torchvision(shard, op, factor):
    base = images(shard)
    got = images(shard, **{op: (factor, factor)})
    # ColorJitter's factors are float32 values (torch.empty(1).uniform_),
    # as wds draws them: torchvision gets the same one
    want = hwc(ADJUST[op](chw(base), float(np.float32(factor))))
    worst, share = diff(got, want)
    print(f"{op} {factor}: max {worst}, share {share:.5f}")
    assert worst <= TOL_MAX and share <= TOL_SHARE, (op, factor, worst, share)
    assert (got != base).any()  # it did something


def test_jitter_order_is_one_of_torchvisions(shard):
    """All four at once with fixed factors: each image is torchvision's
    result for one of the 24 orders, and several orders occur."""
    f = {"brightness": 1.3, "contrast": 0.7, "saturation": 1.5, "hue": 0.1}
    base = images(shard)
    got = images(shard, **{k: (v, v) for k, v in f.items()})
    outs = []
    for order in itertools.permutations(f):
        t = chw(base)
        for op in order:
            t = ADJUST[op](t, float(np.float32(f[op])))
        outs.append(hwc(t))
    used = set()
    for i in range(len(got)):
        scores = [diff(got[i], o[i]) for o in outs]
        best = min(range(len(outs)), key=lambda j: scores[j][1])
        assert scores[best][0] <= TOL_MAX and scores[best][1] <= TOL_SHARE
        used.add(best)
    assert len(used) >= 4


def test_jitter_ranges_vary_per_image_and_repeat(shard):
    kw = dict(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1)
    a = images(shard, **kw)
    assert np.array_equal(a, images(shard, **kw))  # the seed decides
    b = images(shard, seed=8, **kw)
    assert not np.array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_normalize_matches_torchvision(shard, dtype):
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    base = images(shard)
    got = images(shard, image_dtype=dtype, normalize_mean=mean,
                 normalize_std=std)
    assert got.dtype == np.dtype(dtype) and got.shape == (24, 3, 48, 64)
    want = v2.Normalize(mean, std)(v2.ToDtype(torch.float32, scale=True)(
        chw(base)))
    if dtype == "float16":
        want = want.half()
    assert np.array_equal(got, want.numpy())
    # a Batch's array has the rows' dtype and shape (N, C, H, W)
    with wds.Loader(shard, "jpg:64x48", 5, mode="plain",
                    image_dtype=dtype) as lo:
        b = next(iter(lo))
        a = np.asarray(b["jpg"])
        assert a.dtype == np.dtype(dtype) and a.shape == (5, 3, 48, 64)
        assert 0 <= a.min() and a.max() <= 1  # mean 0, std 1: x / 255
        t = b.torch()["jpg"] if hasattr(b, "torch") else None
        if t is not None:
            assert t.dtype == getattr(torch, dtype)


def test_flip_and_ratio(shard):
    never = images(shard, flip_prob=0)
    always = images(shard, flip_prob=1)
    assert np.array_equal(always, never[:, :, ::-1])
    # the default flips about half, from the same boxes
    half = images(shard)
    flipped = [np.array_equal(half[i], always[i]) for i in range(len(half))]
    assert 4 <= sum(flipped) <= 20
    assert all(f or np.array_equal(half[i], never[i])
               for i, f in enumerate(flipped))
    # another ratio range draws other boxes
    assert not np.array_equal(images(shard, crop_ratio=(1.0, 1.0)), half)


@pytest.mark.parametrize("kw,says", [
    (dict(flip_prob=1.5), "flip_prob needs a probability in [0, 1]"),
    (dict(crop_scale=(0.9, 0.2)), "crop_scale (0.9, 0.2)"),
    (dict(crop_scale=0.5), "crop_scale needs two numbers"),
    (dict(crop_ratio=(0, 1)), "crop_ratio needs"),
    (dict(hue=0.7), "hue needs a number H in [0, 0.5]"),
    (dict(brightness=-0.1), "brightness needs"),
    (dict(image_dtype="float32", normalize_std=(1, 0, 1)),
     "normalize_std[1] 0"),
    (dict(normalize_mean=0.5), "need image_dtype float32 or float16"),
    (dict(image_dtype="float64"), "image_dtype must be uint8, float32"),
    (dict(contrast="x"), "contrast needs"),
    (dict(saturation=[1, 2, 3]), "saturation needs"),
])
def test_bad_values_name_the_keyword(shard, kw, says):
    with pytest.raises(ValueError) as e:
        wds.Loader(shard, "jpg", 2, **kw)
    assert says in str(e.value)
