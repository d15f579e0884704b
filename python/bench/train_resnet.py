"""Loader to GPU, and torchvision ResNet training in bf16, fed by wds or by
torch's DataLoader + Python webdataset: images/s and the data-wait fraction
(scripts/gpu-run.sh runs it; docs/performance.md, "GPU checks in one call").

Usage: python train_resnet.py SHARD... [--feeders wds,torch-wds]
       [--models none,resnet18,resnet50] [--steps 50] [--warmup 10]
       [--batch-size 128] [--workers W] [--classes 10] [--budget 60]
       [--json OUT]

SHARD... are .tar shards of photo-like JPEGs with a .cls label (as
scripts/gpu-run.sh makes them with scripts/gen-photo-jpegs.py). Every pair
of --models x --feeders is one run, in this process:

  feeders  wds        wds.Loader(SHARDS, "jpg:rgb:224,cls", B, workers=W):
                      decode, resize the shorter side to 224, center crop,
                      in the C loader's threads; each batch copied to the
                      GPU with non_blocking=True from its pinned slot, the
                      slot kept until an event recorded after the copies
                      has completed (with Loader(device=...) where the
                      loader has it, the loader's own copies)
           torch-wds  torch DataLoader(num_workers=W, pin_memory=True) over
                      webdataset.WebDataset(SHARDS, resampled=True)
                      .decode("pil") and the same resize and crop in PIL,
                      copied with .to("cuda", non_blocking=True)
  models   none       the feed alone: loader to GPU
           resnet18, resnet50  torchvision's, channels_last, SGD with
                      momentum, forward and loss under
                      torch.autocast("cuda", bfloat16)

Each run takes --warmup steps untimed (worker start-up, cuDNN's choices),
then --steps timed steps (fewer when --budget seconds run out: said in the
row). A step: take the next batch (its wait is the data wait), normalise
it on the GPU, the model's step, then torch.cuda.synchronize(), so each
step ends with the GPU idle and the data wait is the time the GPU would
have had nothing to do. Prints one JSON line per run ({"feeder", "model",
"images_per_s", "data_wait_pct", "step_ms", "steps", "note"}), then a table.
Runs that cannot happen here say why (no torch, no CUDA GPU, no
torchvision, no webdataset, no wds) and are skipped; exit status 0 when
every run ran or was skipped with its reason, 77 when none could run, 1
when a run failed.
"""

import argparse
import importlib.util
import json
import os
import sys
import time

FEEDERS = ("wds", "torch-wds")
MODELS = ("none", "resnet18", "resnet50")
SIZE = 224


def csv_choice(allowed):
    def parse(s):
        items = [x.strip() for x in s.split(",") if x.strip()]
        bad = [x for x in items if x not in allowed]
        if not items or bad:
            raise argparse.ArgumentTypeError(
                f"{s!r}: a comma-separated list of {', '.join(allowed)}")
        return items
    return parse


def positive(s):
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{s}: must be at least 1")
    return v


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shards", nargs="+", help=".tar shards (jpg + cls)")
    p.add_argument("--feeders", type=csv_choice(FEEDERS), default=list(FEEDERS))
    p.add_argument("--models", type=csv_choice(MODELS), default=list(MODELS))
    p.add_argument("--steps", type=positive, default=50, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--batch-size", type=positive, default=128)
    p.add_argument("--workers", type=positive,
                   default=max(1, min(15, (os.cpu_count() or 2) - 1)),
                   help="loader threads / DataLoader processes (default: cores - 1, at most 15)")
    p.add_argument("--classes", type=positive, default=10)
    p.add_argument("--budget", type=float, default=60.0,
                   help="seconds per run, warm-up included; the timed steps stop there")
    p.add_argument("--json", help="append each run's JSON line to this file too")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: the same runs without a GPU (no copies, no bf16 "
                   "autocast on the GPU: checks the script, measures nothing of interest)")
    a = p.parse_args(argv)
    if a.warmup < 0:
        p.error("--warmup: must be 0 or more")
    return a


def plan(a):
    """The runs, in order: (model, feeder) for each model, each feeder."""
    return [(m, f) for m in a.models for f in a.feeders]


def missing(module):
    return importlib.util.find_spec(module) is None


def why_not(model, feeder, device="cuda"):
    """Why a run cannot happen here (None: it can), without importing torch
    when it is not there."""
    if missing("torch"):
        return "no torch"
    if feeder == "torch-wds" and missing("webdataset"):
        return "no webdataset (pip install webdataset)"
    if feeder == "torch-wds" and missing("PIL"):
        return "no Pillow (webdataset's decoder)"
    if feeder == "wds" and missing("wds"):
        return "no wds extension on PYTHONPATH"
    if model != "none" and missing("torchvision"):
        return "no torchvision"
    import torch
    if device == "cuda" and not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    return None


def row(model, feeder, images_per_s=None, data_wait_pct=None, step_ms=None,
        steps=0, note=""):
    return {"feeder": feeder, "model": model, "images_per_s": images_per_s,
            "data_wait_pct": data_wait_pct, "step_ms": step_ms, "steps": steps,
            "note": note}


def format_table(rows):
    """The runs as a fixed-width table (a list of lines)."""
    head = ("model", "feeder", "images/s", "data-wait", "step ms", "steps", "note")
    cells = [head]
    for r in rows:
        def num(v, fmt):
            return "-" if v is None else format(v, fmt)
        cells.append((r["model"], r["feeder"], num(r["images_per_s"], ",.0f"),
                      "-" if r["data_wait_pct"] is None else f"{r['data_wait_pct']:.1f}%",
                      num(r["step_ms"], ".1f"), str(r["steps"]), r["note"]))
    width = [max(len(c[i]) for c in cells) for i in range(len(head))]
    right = {2, 3, 4, 5}
    out = []
    for k, c in enumerate(cells):
        out.append("  ".join(c[i].rjust(width[i]) if i in right else c[i].ljust(width[i])
                             for i in range(len(head))).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in width))
    return out


# ---- feeders ------------------------------------------------------------------

def wds_batches(a, dev):
    """(images uint8 NHWC on dev, labels int64 on dev), forever."""
    import inspect

    import torch
    import wds

    kw = dict(workers=a.workers, shuffle_buffer=1000, seed=1, prefetch=6,
              eager_next_epoch=True)
    own = "device" in inspect.signature(wds.Loader).parameters
    if own:
        kw["device"] = dev
    loader = wds.Loader(a.shards, f"jpg:rgb:{SIZE},cls", a.batch_size, **kw)
    held = []  # (batch, event): slots whose copies may still be reading them
    try:
        while True:
            for b in loader:
                t = b.torch()
                x, y = t["jpg"], t["cls"]
                if x.device.type == "cuda" and y.device.type == "cuda":
                    yield x, y  # the loader's own ordered copies
                    continue
                if dev.type != "cuda":  # --device cpu: copies, then the slot back
                    x, y = x.clone(), y.clone()
                    del t
                    b.release()
                    yield x, y
                    continue
                x = x.to(dev, non_blocking=True)
                y = y.to(dev, non_blocking=True)
                ev = torch.cuda.Event()
                ev.record()
                del t
                held.append((b, ev))
                while held and (len(held) > 2 or held[0][1].query()):
                    hb, hev = held.pop(0)
                    hev.synchronize()  # the copies from its slot are done
                    hb.release()
                yield x, y
    finally:
        for hb, hev in held:
            hev.synchronize()
            hb.release()
        loader.close()


def torch_wds_batches(a, dev):
    import numpy as np
    import torch
    import webdataset as wd
    from PIL import Image

    def preprocess(img):
        w, h = img.size
        s = SIZE / min(w, h)
        nw, nh = max(SIZE, round(w * s)), max(SIZE, round(h * s))
        img = img.resize((nw, nh), Image.BILINEAR)
        x, y = (nw - SIZE) // 2, (nh - SIZE) // 2
        return torch.from_numpy(np.array(img.convert("RGB").crop((x, y, x + SIZE, y + SIZE))))

    ds = (wd.WebDataset(a.shards, resampled=True, shardshuffle=False, empty_check=False)
          .decode("pil").to_tuple("jpg", "cls").map_tuple(preprocess, int))
    loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, num_workers=a.workers,
                                         pin_memory=dev.type == "cuda",
                                         persistent_workers=True,
                                         prefetch_factor=4)
    for x, y in loader:
        yield x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)


# ---- one run --------------------------------------------------------------------

def run(a, model_name, feeder):
    import torch
    import torch.nn.functional as F

    dev = (torch.device("cuda", torch.cuda.current_device()) if a.device == "cuda"
           else torch.device("cpu"))
    torch.backends.cudnn.benchmark = True
    model = opt = None
    if model_name != "none":
        import torchvision

        model = getattr(torchvision.models, model_name)(num_classes=a.classes)
        model = model.to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    mean = torch.tensor([0.485, 0.456, 0.406], device=dev).view(1, 3, 1, 1) * 255
    std = torch.tensor([0.229, 0.224, 0.225], device=dev).view(1, 3, 1, 1) * 255
    gen = wds_batches(a, dev) if feeder == "wds" else torch_wds_batches(a, dev)
    start = time.perf_counter()
    wait = total = 0.0
    steps = 0
    note = ""
    try:
        for k in range(a.warmup + a.steps):
            if k >= a.warmup and time.perf_counter() - start > a.budget:
                note = f"budget {a.budget:.0f} s reached"
                break
            t0 = time.perf_counter()
            x, y = next(gen)
            t1 = time.perf_counter()
            x = x.permute(0, 3, 1, 2).float().sub_(mean).div_(std)
            x = x.contiguous(memory_format=torch.channels_last)
            y = y.view(-1).long() % a.classes
            if model is not None:
                with torch.autocast(dev.type, dtype=torch.bfloat16):
                    loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t2 = time.perf_counter()
            if k >= a.warmup:
                wait += t1 - t0
                total += t2 - t0
                steps += 1
    finally:
        gen.close()
    if not steps:
        return row(model_name, feeder, steps=0, note=note or "no timed step")
    return row(model_name, feeder, images_per_s=steps * a.batch_size / total,
               data_wait_pct=100.0 * wait / total, step_ms=1000.0 * total / steps,
               steps=steps, note=note)


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    rows, failed, ran = [], 0, 0
    for model, feeder in plan(a):
        why = why_not(model, feeder, a.device)
        if why:
            r = row(model, feeder, note="skipped: " + why)
        else:
            try:
                r = run(a, model, feeder)
                ran += 1
            except Exception as e:  # a run's failure is its row; the others go on
                r = row(model, feeder, note=f"FAILED: {type(e).__name__}: {e}"[:200])
                failed += 1
            import gc
            gc.collect()
        rows.append(r)
        line = json.dumps(r)
        print(line, flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(line + "\n")
    print(f"batches of {a.batch_size} at {SIZE}x{SIZE}, {a.workers} workers, "
          f"{a.steps} timed steps after {a.warmup} (data-wait: share of step time "
          "spent waiting for the batch)")
    for line in format_table(rows):
        print(line)
    if failed:
        return 1
    return 0 if ran else 77


if __name__ == "__main__":
    sys.exit(main())
