#!/usr/bin/env python3
"""Your own pipeline under torchrun: wds.Dataset + DataLoader workers running
torchvision v2 transforms on the images and a tokenizer on the captions.

    torchrun --standalone --nproc-per-node 2 examples/train_transforms.py \\
        --train 'data-{000..009}.tar' --index data.index.json --workers 2

Each sample needs an image (jpg or png), a caption (txt; --text FIELD, or
--text none for shards without one) and a class id (cls). The C loader reads, shuffles and decodes the images (at --decode-size,
so the crop has pixels to choose from); the DataLoader's worker processes
run RandomResizedCrop, the flip, ColorJitter and Normalize, and tokenize
the caption into a padded tensor of token ids (a small hashing word
tokenizer stands in for yours: any function of a str works, a Hugging Face
tokenizer included). The model is a toy (a linear layer over pooled image
features plus a bag of words) trained with DDP: the point is the data path.

Exact mode: every sample of the epoch once over all ranks and DataLoader
workers, every rank the same number of steps. Rank 0 prints each epoch's
loss and accuracy; each rank prints "rank R: steps N".
"""
import argparse
import os
import re
import sys
import zlib

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

import wds

VOCAB = 4096
MAX_TOKENS = 16


def tokenize(text):
    """Words to ids by a stable hash (0 is padding), cut or padded to
    MAX_TOKENS: a stand-in for a real tokenizer."""
    ids = [1 + zlib.crc32(w.encode()) % (VOCAB - 1)
           for w in re.findall(r"\w+", text.lower())][:MAX_TOKENS]
    return torch.tensor(ids + [0] * (MAX_TOKENS - len(ids)), dtype=torch.int64)


class Transform:
    """A sample dict into (image tensor, token ids, label, valid). A class
    (not a lambda) so that it pickles for any start method."""

    def __init__(self, size, text):
        from torchvision.transforms import v2

        self.text = text

        self.image = v2.Compose([
            v2.ToImage(),  # HWC uint8 array -> CHW uint8 tensor
            v2.RandomResizedCrop(size, scale=(0.2, 1.0), antialias=True),
            v2.RandomHorizontalFlip(),
            v2.ColorJitter(0.4, 0.4, 0.4, 0.1),
            v2.ToDtype(torch.float32, scale=True),
            v2.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ])

    def __call__(self, s):
        caption = s[self.text] if self.text else ""
        return self.image(s["jpg"]), tokenize(caption), s["cls"], s["__valid__"]


class Toy(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, 32, padding_idx=0)
        self.conv = nn.Conv2d(3, 16, 5, stride=4)
        self.head = nn.Linear(16 + 32, classes)

    def forward(self, x, tokens):
        img = F.adaptive_avg_pool2d(F.relu(self.conv(x)), 1).flatten(1)
        return self.head(torch.cat([img, self.embed(tokens)], 1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--train", required=True, help="the shards (a spec)")
    p.add_argument("--index", help="the shards' `wds index` file (exact mode's counts)")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--workers", type=int, default=2, help="DataLoader worker processes")
    p.add_argument("--image-size", type=int, default=64, help="the crop's output size")
    p.add_argument("--decode-size", type=int, default=96, help="the C decoder's size")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--text", default="txt",
                   help="the caption's field (\"none\": shards without captions)")
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    # "jpg;png:rgb:N": decoded and resized by the C loader's workers
    text = None if a.text == "none" else a.text
    fields = f"jpg;png:rgb:{a.decode_size},cls" + (f",{text}" if text else "")
    ds = wds.Dataset(a.train, fields, index=a.index, shuffle_buffer=200,
                     seed=a.seed).map(Transform(a.image_size, text))
    loader = DataLoader(ds, batch_size=a.batch_size, num_workers=a.workers,
                        persistent_workers=False)
    model = nn.parallel.DistributedDataParallel(Toy(a.classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    steps = 0
    for epoch in range(a.epochs):
        ds.set_epoch(epoch)  # as DistributedSampler's
        meter = torch.zeros(3, dtype=torch.float64)
        for x, tokens, y, valid in loader:
            logits = model(x, tokens)
            w = valid.float()
            loss = (F.cross_entropy(logits, y, reduction="none") * w).sum() / w.sum().clamp(min=1)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            meter += torch.stack([loss.detach().double() * w.sum(),
                                  ((logits.argmax(1) == y).double() * w).sum(), w.sum().double()])
        dist.all_reduce(meter)
        if rank == 0:
            print(f"epoch {epoch}: loss {meter[0] / meter[2]:.4f} "
                  f"accuracy {meter[1] / meter[2]:.3f} ({int(meter[2])} samples)", flush=True)
    print(f"rank {rank}: steps {steps}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
