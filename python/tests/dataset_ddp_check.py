"""ctest python_dataset_ddp (run.sh dataset_ddp): wds.Dataset under torchrun
on 2 and 3 CPU ranks (gloo), each rank a DataLoader with 0, 2 and 3 worker
processes: every sample of the epoch once over all ranks and workers (the
padding repeats as DistributedSampler's, marked __valid__ False: the valid rows
are every sample once), and every rank the same number of
batches, each step an all-reduce (which unequal steps would leave hanging).
Not named test_*: the pytest suite leaves it out.
Usage: python dataset_ddp_check.py (environment: WDS_TEST_CLI); under
torchrun it is the per-rank worker (--rank-main SPEC INDEX)."""
import collections
import os
import subprocess
import sys
import tempfile
import time

N_SAMPLES = 211  # a prime: no split of it is even


def rank_main(spec, index):
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    import wds

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    for nw in (0, 2, 3):
        for epoch in (0, 1):
            ds = wds.Dataset(spec, "cls,txt", index=index, shuffle_buffer=30,
                             seed=11)  # rank and world from torch.distributed
            ds.set_epoch(epoch)
            dl = DataLoader(ds, batch_size=8, num_workers=nw,
                            multiprocessing_context="fork" if nw else None)
            keys, steps, valid = [], 0, []
            for b in dl:
                keys += list(b["__key__"])
                valid += [k for k, v in zip(b["__key__"], b["__valid__"]) if v]
                assert all(t == f"text {k}" for k, t in zip(b["__key__"], b["txt"]))
                t = torch.ones(1)
                dist.all_reduce(t)  # a step of DDP: every rank must take it
                steps += 1
            got = [None] * world
            dist.all_gather_object(got, (steps, keys, valid))
            if rank == 0:
                counts = [s for s, _, _ in got]
                every = [k for _, ks, _ in got for k in ks]
                good = sorted(k for _, _, vs in got for k in vs)
                c = collections.Counter(every)
                padded = -N_SAMPLES % (world * max(nw, 1))
                # the padding is marked: the valid rows are every key once
                ok = (len(set(counts)) == 1 and len(every) == N_SAMPLES + padded
                      and set(c) == {f"s{i:04d}" for i in range(N_SAMPLES)}
                      and good == [f"s{i:04d}" for i in range(N_SAMPLES)])
                print(f"world {world} num_workers {nw} epoch {epoch}: steps {counts}, "
                      f"{len(every)} samples ({padded} padding): {'ok' if ok else 'FAIL'}",
                      flush=True)
                if not ok:
                    sys.exit(1)
    dist.barrier()
    dist.destroy_process_group()


def main():
    wds_cli = os.environ["WDS_TEST_CLI"]
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "files"))
        for i in range(N_SAMPLES):
            for ext, data in (("cls", str(i % 10)), ("txt", f"text s{i:04d}")):
                with open(os.path.join(d, "files", f"s{i:04d}.{ext}"), "w") as f:
                    f.write(data)
        subprocess.run([wds_cli, "write", "-o", os.path.join(d, "s-%04d.tar"),
                        "--maxcount", "40", os.path.join(d, "files")], check=True)
        spec = os.path.join(d, "s-{0000..0005}.tar")
        index = os.path.join(d, "index.json")
        subprocess.run([wds_cli, "index", "-o", index, spec], check=True)
        for nproc in (2, 3):
            env = dict(os.environ, OMP_NUM_THREADS="1")
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(nproc), __file__, "--rank-main", spec, index]
            for attempt in (0, 1):
                r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=env, timeout=240)
                # gloo's connection of the ranks at init_process_group (before
                # any wds code) now and then fails on a loaded machine: once more
                if attempt or r.returncode == 0 or "connectFullMesh failed" not in r.stdout:
                    break
                print("# gloo could not connect the ranks (connectFullMesh failed): once more")
            print(r.stdout if r.returncode else
                  "\n".join(line for line in r.stdout.splitlines()
                            if line.startswith("world")))
            if r.returncode != 0:
                sys.exit(f"FAIL: torchrun --nproc-per-node {nproc}: exit {r.returncode}")
        transforms_example(d, wds_cli)
    print(f"# ok ({time.time() - t0:.1f} s)")


def transforms_example(d, wds_cli):
    """examples/train_transforms.py (torchvision v2 transforms and a
    tokenizer in DataLoader workers) under torchrun, 2 ranks x 2 workers:
    equal steps on both ranks, the epoch's loss and accuracy printed."""
    import re

    try:
        import torchvision  # noqa: F401
    except ImportError:
        print("# SKIP examples/train_transforms.py: torchvision is not installed")
        return
    import io

    import numpy as np
    from PIL import Image

    import wds

    rng = np.random.default_rng(0)
    with wds.ShardWriter(os.path.join(d, "img-%02d.tar"), maxcount=30) as w:
        for i in range(90):
            buf = io.BytesIO()
            Image.fromarray(rng.integers(0, 255, (80 + i % 5, 100, 3), np.uint8)).save(
                buf, format="JPEG")
            w.write({"__key__": f"i{i:03d}", "jpg": buf.getvalue(), "cls": i % 10,
                     "txt": f"a photo of thing {i % 10} number {i}"})
    spec = os.path.join(d, "img-{00..02}.tar")
    index = os.path.join(d, "img.index.json")
    subprocess.run([wds_cli, "index", "-o", index, spec], check=True)
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", "2",
                        os.path.join(src, "examples", "train_transforms.py"),
                        "--train", spec, "--index", index, "--workers", "2",
                        "--epochs", "2", "--batch-size", "8"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    steps = dict(re.findall(r"^rank (\d): steps (\d+)$", r.stdout, re.M))
    epochs = re.findall(r"^epoch \d: loss \d+\.\d+ accuracy \d\.\d+ \((\d+) samples\)$",
                        r.stdout, re.M)
    # 90 samples over 2 ranks x 2 workers: 23 each (2 padding), batches of
    # 8, 8, 7 from each worker: 6 steps per epoch on each rank; the loss
    # and accuracy count the valid rows: the 90 samples (the 2 padding rows
    # are marked invalid)
    if r.returncode != 0 or steps != {"0": "12", "1": "12"} or epochs != ["90", "90"]:
        print(r.stdout)
        sys.exit(f"FAIL: examples/train_transforms.py: exit {r.returncode}, steps {steps}, "
                 f"epochs {epochs} (want 2 x 6 steps per rank, 90 samples per epoch)")
    print(f"examples/train_transforms.py: steps {steps}, samples per epoch {epochs}: ok")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--rank-main":
        rank_main(sys.argv[2], sys.argv[3])
    else:
        main()
