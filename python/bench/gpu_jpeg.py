"""The GPU JPEG benchmarks' Python drivers (scripts/bench-gpu-jpeg.sh).

Usage:
  python gpu_jpeg.py torchvision TAR... [--batch-size B] [--epochs E]
      [--warmup-epochs K] [--size 224]
    The reference: the tars' JPEGs read in one process, batches decoded by
    torchvision.io.decode_jpeg(list, device="cuda") (nvJPEG), each image
    resized (shorter side, antialiased bilinear) and center-cropped on the
    GPU with torchvision.transforms.v2.functional. Prints one JSON line with
    samples_per_s.
  python gpu_jpeg.py resnet50 SPEC [--workers W] [--batch-size B]
      [--steps N] [--jpeg-decode cpu|gpu]
    Trains torchvision's ResNet-50 in bf16 (autocast, SGD, channels_last)
    on wds.Loader(device="cuda", jpeg_decode=...) batches (random crops,
    224) and prints one JSON line: steps/s, images/s and data_wait_pct,
    the share of the steps' wall time spent waiting for the next batch
    (the GPU synchronised before the wait is timed, so compute is not
    counted as waiting).
"""

import argparse
import json
import sys
import tarfile
import time


def torchvision_ref(a):
    import torch
    import torchvision
    from torchvision.transforms.v2 import functional as F

    datas = []
    for path in a.tars:
        with tarfile.open(path) as t:
            for m in t:
                if m.name.endswith(".jpg"):
                    datas.append(torch.frombuffer(bytearray(
                        t.extractfile(m).read()), dtype=torch.uint8))
    dev = torch.device("cuda")

    def epoch():
        n = 0
        for i in range(0, len(datas), a.batch_size):
            imgs = torchvision.io.decode_jpeg(datas[i:i + a.batch_size],
                                              device=dev)
            out = torch.stack([
                F.center_crop(F.resize(x, a.size, antialias=True), a.size)
                for x in imgs])
            n += out.shape[0]
        torch.cuda.synchronize()
        return n

    for _ in range(a.warmup_epochs):
        epoch()
    t0 = time.perf_counter()
    p0 = time.process_time()
    n = sum(epoch() for _ in range(a.epochs))
    secs = time.perf_counter() - t0
    pcpu = time.process_time() - p0
    json.dump({"what": "torchvision decode_jpeg(device=cuda) + resize/crop",
               "torchvision": torchvision.__version__, "samples": n,
               "seconds": round(secs, 6),
               "samples_per_s": round(n / secs, 1),
               "cpu_threads": round(pcpu / secs, 2)}, sys.stdout)
    print()


def resnet50(a):
    import torch
    import torchvision

    import wds

    dev = torch.device("cuda")
    model = torchvision.models.resnet50(num_classes=10).to(dev).to(
        memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255
    loader = wds.Loader(a.spec, "jpg:rgb:224,cls", a.batch_size,
                        mode="resampled", samples_per_epoch=a.batch_size *
                        (a.steps + a.warmup), workers=a.workers,
                        shuffle_buffer=256, crop="random", device=dev,
                        jpeg_decode=a.jpeg_decode)
    it = iter(loader)
    wait = 0.0
    steps = 0
    t0 = None
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            wait = 0.0
        torch.cuda.synchronize()
        w0 = time.perf_counter()
        b = next(it)
        wait += time.perf_counter() - w0
        x = b["jpg"].permute(0, 3, 1, 2).float().sub_(mean).div_(std)
        x = x.contiguous(memory_format=torch.channels_last)
        y = b["cls"].long()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += s >= a.warmup
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    stats = loader.stats().get("gpu_jpeg", {})
    loader.close()
    json.dump({"what": "resnet50 bf16", "jpeg_decode": a.jpeg_decode,
               "workers": a.workers, "batch_size": a.batch_size,
               "steps": steps, "seconds": round(secs, 3),
               "samples_per_s": round(steps * a.batch_size / secs, 1),
               "data_wait_pct": round(100 * wait / secs, 2),
               "gpu_jpeg": stats}, sys.stdout)
    print()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("torchvision")
    t.add_argument("tars", nargs="+")
    t.add_argument("--batch-size", type=int, default=64)
    t.add_argument("--epochs", type=int, default=2)
    t.add_argument("--warmup-epochs", type=int, default=1)
    t.add_argument("--size", type=int, default=224)
    r = sub.add_parser("resnet50")
    r.add_argument("spec")
    r.add_argument("--workers", type=int, default=4)
    r.add_argument("--batch-size", type=int, default=128)
    r.add_argument("--steps", type=int, default=60)
    r.add_argument("--warmup", type=int, default=10)
    r.add_argument("--jpeg-decode", choices=("cpu", "gpu"), default="gpu")
    a = ap.parse_args()
    torchvision_ref(a) if a.cmd == "torchvision" else resnet50(a)


if __name__ == "__main__":
    main()
