"""_decode.py — the Python-side decoding of one field's raw bytes, shared by
wds.Dataset (its _post, in the DataLoader's workers) and wds.Loader's
transform pool (_transform.py, in its worker processes). It imports neither
torch nor the extension at module level, so a pool worker whose fn does not
need torch never loads it."""
import io
import json

import numpy as np


def decode_image(data, how):
    """An encoded image as "pil" (a PIL image), "torch" (an HWC uint8
    tensor) or anything else (an HWC uint8 numpy array), RGB unless it is
    already."""
    from PIL import Image

    im = Image.open(io.BytesIO(data))
    im.load()
    if how == "pil":
        return im
    a = np.asarray(im.convert("RGB") if im.mode != "RGB" else im)
    if how == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(a))
    return a


def decode_field(post, data, image):
    """DATA (bytes-like) decoded by how its field is read: "text" (str),
    "json" (objects), "npy" (an array of any shape), else an image as
    decode_image's HOW=IMAGE. Raises what the decoder raises; the callers
    name the sample and field."""
    if post == "text":
        return bytes(data).decode("utf-8")
    if post == "json":
        return json.loads(bytes(data))
    if post == "npy":
        return np.load(io.BytesIO(bytes(data)), allow_pickle=False)
    return decode_image(bytes(data), image)
