#!/usr/bin/env python3
"""A small CNN trained on WebDataset image shards under DistributedDataParallel,
fed by wds.Loader in exact mode. Run it with torchrun:

    torchrun --standalone --nproc-per-node 2 examples/train_ddp.py \\
        --train 'digits/digits-train-{0000..0004}.tar' --epochs 5 --checkpoint digits.pt

Each rank takes len(loader) batches per epoch (exact mode: every sample once
per epoch across the ranks, the same batch count on every rank); rank and
world size come from torch.distributed. The backend is NCCL when CUDA is
available, else gloo on CPU; on CPU the run is deterministic (fixed seeds,
deterministic algorithms, one thread), so two runs end with the same weights.
On GPUs each process uses the GPU of its LOCAL_RANK (at most one process per
GPU: more is an error that says so) and the loader delivers batches on it
(wds.Loader(device=...)): the copy of the next batch runs on the loader's
own stream while the GPU still computes this step.

The checkpoint (--checkpoint, written by rank 0 every --save-every steps and
at the end) holds the model, the optimizer and the loader's state_dict();
--resume restores all three and continues where it stopped, mid-epoch
included, with the batches an uninterrupted run would have taken.
--stop-after K saves and exits after K steps (to try --resume).

--train has no default; the other defaults (--image-size 8, --channels 1,
--classes 10) fit the demo's digits (8x8 gray PNGs with a .cls label), as
scripts/demo-run.sh makes them (without --train the script says so):

    python3 scripts/make-digits.py digits/files
    wds write -o 'digits/digits-train-%04d.tar' --maxcount 300 digits/files/train

Rank 0 prints each epoch's training loss and accuracy over all ranks
("epoch E: loss L accuracy A (N samples)"; --log-every N adds the loss every
N steps). Each rank prints its step count and, at the end, a SHA-256 of the
weights ("rank R: steps N", "rank R: weights SHA"): equal on every rank.
"""
import argparse
import gc
import hashlib
import os
import sys
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import wds


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", help="shard spec of the training set (images + .cls)")
    p.add_argument("--index", help="the shard set's index (wds index), optional")
    p.add_argument("--image-size", type=int, default=8)
    p.add_argument("--channels", type=int, choices=(1, 3), default=1)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32, help="per rank")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shuffle-buffer", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2, help="loader threads per rank")
    p.add_argument("--checkpoint", help="checkpoint file (written by rank 0)")
    p.add_argument("--save-every", type=int, default=0, help="steps between checkpoints (0: at the end only)")
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--stop-after", type=int, default=0,
                   help="save the checkpoint and stop after this many steps (0: run to the end)")
    p.add_argument("--log-every", type=int, default=0)
    a = p.parse_args()
    if not a.train:
        p.exit(2, "train_ddp.py: no --train shards. Make the demo's digits with:\n"
               "  python3 scripts/make-digits.py digits/files\n"
               "  wds write -o 'digits/digits-train-%04d.tar' --maxcount 300 digits/files/train\n"
               "then pass --train 'digits/digits-train-{0000..0004}.tar'\n")
    if (a.resume or a.stop_after or a.save_every) and not a.checkpoint:
        p.error("--resume, --stop-after and --save-every need --checkpoint")
    return a


class SmallCNN(nn.Module):
    def __init__(self, channels, size, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * (size // 2) * (size // 2), classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(torch.flatten(x, 1))


def say(line):
    """One line in one write(2): the ranks share torchrun's stdout."""
    sys.stdout.flush()
    os.write(sys.stdout.fileno(), (line + "\n").encode())


def weights_sha(model):
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def save(path, model, opt, loader, step):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "loader": loader.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def gpu_for(local_rank, local_world, gpus):
    """The GPU of this process, or an error naming the counts: one process
    per GPU (NCCL refuses two ranks on one device)."""
    if local_world > gpus or local_rank >= gpus:
        raise SystemExit(
            f"train_ddp.py: {local_world} processes on this node but {gpus} "
            f"GPU{'' if gpus == 1 else 's'} (local rank {local_rank} has none): "
            f"start at most {gpus} (torchrun --nproc-per-node {gpus}), or hide "
            f"the GPUs (CUDA_VISIBLE_DEVICES=) to train on the CPU")
    return torch.device("cuda", local_rank)


def main():
    a = parse_args()
    cuda = torch.cuda.is_available()
    if cuda:  # before the process group: NCCL would fail with less to say
        dev = gpu_for(int(os.environ.get("LOCAL_RANK", 0)),
                      int(os.environ.get("LOCAL_WORLD_SIZE", 1)),
                      torch.cuda.device_count())
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if cuda:
        torch.cuda.set_device(dev)
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.backends.cudnn.benchmark = False
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    # conv1's weight gradient with one input channel: a benign stride mismatch
    warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
    torch.use_deterministic_algorithms(True, warn_only=True)

    model = SmallCNN(a.channels, a.image_size, a.classes).to(dev)  # same init on every rank
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
    mode = "l" if a.channels == 1 else "rgb"
    loader = wds.Loader(a.train, f"jpg;png:{mode}:{a.image_size},cls", a.batch_size,
                        mode="exact", seed=a.seed, shuffle_buffer=a.shuffle_buffer,
                        workers=a.workers, index=a.index,  # rank/world: torch.distributed
                        device=dev if cuda else None)  # batches arrive on the GPU
    per_epoch = len(loader)

    step, resumed = 0, False
    if a.resume:
        ck = torch.load(a.checkpoint, map_location=dev, weights_only=False)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optimizer"])
        loader.load_state_dict(ck["loader"])
        step, resumed = ck["step"], True
        if rank == 0:
            print(f"resumed at step {step}: epoch {ck['loader']['epoch']}, "
                  f"batch {ck['loader']['batches']} of {per_epoch}", flush=True)
    start_epoch = loader.epoch if resumed else 0

    taken = 0  # steps this process took
    stopped = False
    for epoch in range(start_epoch, a.epochs):
        if not (resumed and epoch == start_epoch):
            loader.set_epoch(epoch)  # a resumed epoch goes on where it stopped
        ddp.train()
        # This epoch's training loss and accuracy over the valid rows of
        # every rank (summed here, all-reduced at the end of the epoch).
        meter = torch.zeros(3, dtype=torch.float64, device=dev)
        for batch in loader:  # on a GPU: wds.DeviceBatch, already on dev
            with batch:
                t = batch.torch()
                x = t["jpg;png"].permute(0, 3, 1, 2).float().div_(255).contiguous()
                y = t["cls"].clone()  # a CPU batch's tensors view its slot
                w = t["__valid__"].float()
            logits = ddp(x)
            loss = (F.cross_entropy(logits, y, reduction="none") * w).sum() / w.sum().clamp(min=1)
            with torch.no_grad():
                meter += torch.stack([loss.detach().double() * w.sum(),
                                      ((logits.argmax(1) == y).double() * w).sum(),
                                      w.sum().double()])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            taken += 1
            if a.log_every and rank == 0 and step % a.log_every == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
            if rank == 0 and a.save_every and step % a.save_every == 0:
                save(a.checkpoint, model, opt, loader, step)
            if a.stop_after and step >= a.stop_after:
                stopped = True
                break
        dist.all_reduce(meter)  # every rank took the same steps (exact mode)
        if rank == 0 and meter[2] > 0:
            print(f"epoch {epoch}: loss {meter[0] / meter[2]:.4f} "
                  f"accuracy {meter[1] / meter[2]:.3f} ({int(meter[2])} samples)",
                  flush=True)
        if stopped:
            break

    if rank == 0 and a.checkpoint:
        save(a.checkpoint, model, opt, loader, step)
    dist.barrier()
    say(f"rank {rank}: steps {taken} (step {step}, {per_epoch} per epoch, world {world})")
    say(f"rank {rank}: weights {weights_sha(model)}")
    loader.close()
    dist.barrier()  # every rank done with gloo before any tears it down
    # DDP's reducer holds the process group, and the module's hooks make
    # reference cycles, so without this the group (and gloo's threads) would
    # be freed by the collector during interpreter shutdown, where torch can
    # abort ("terminate called without an active exception"). Free them now.
    del ddp, opt
    gc.collect()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
