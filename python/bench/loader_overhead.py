"""wds.Loader iterated from Python, timed as `wds bench` times the C loop.

Usage: python loader_overhead.py SPEC FIELDS BATCH_SIZE [--workers W]
       [--shuffle-buffer N] [--epochs E] [--warmup-epochs K] [--touch MODE]

Opens wds.Loader(SPEC, FIELDS, BATCH_SIZE, mode="plain", ...) (the options
`wds bench` takes: plain mode, the same workers, shuffle buffer and batch
size), runs --warmup-epochs epochs untimed, then times --epochs epochs and
prints one JSON line with samples_per_s, as `wds bench --json` does.

--touch says what is done with each batch before it is released:
  none   nothing (batch.release() only)
  arrays every field is taken from the batch (batch[name]: a numpy array
         viewing the slot, or for a bytes field the sequence of bytes), and
         one element of each is read (a[-1]); the valid flags too
  all    as arrays, and every bytes item is made (len() of each)

--device DEV (e.g. cuda) opens the Loader with device=DEV: the batches are
wds.DeviceBatch tensors on the GPU (touched as above, without a host
synchronisation); the timed span ends with torch.cuda.synchronize(), so
every copy is counted.

--jpeg-decode gpu (with --device) decodes the JPEG fields with nvJPEG on
that GPU (wds.Loader(jpeg_decode="gpu")); the workers only plan the crops.
"""

import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spec")
    ap.add_argument("fields")
    ap.add_argument("batch_size", type=int)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--shuffle-buffer", type=int, default=0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--warmup-epochs", type=int, default=0)
    ap.add_argument("--touch", choices=("none", "arrays", "all"), default="arrays")
    ap.add_argument("--device", help="device= of the Loader (e.g. cuda)")
    ap.add_argument("--jpeg-decode", choices=("cpu", "gpu"), default="cpu")
    a = ap.parse_args()
    import wds

    loader = wds.Loader(a.spec, a.fields, a.batch_size, mode="plain",
                        workers=a.workers, shuffle_buffer=a.shuffle_buffer,
                        device=a.device, jpeg_decode=a.jpeg_decode)
    sync = lambda: None  # noqa: E731
    if a.device:
        import torch

        sync = torch.cuda.synchronize
    touch = a.touch

    batches = 0

    def epoch():
        nonlocal batches
        n = 0
        for b in loader:
            batches += 1
            n += len(b)
            if touch != "none":
                for name in b:
                    v = b[name]
                    v[-1]
                    if touch == "all" and isinstance(v[0], bytes):
                        for x in v:
                            len(x)
                b.valid[-1]
            b.release()
        return n

    for _ in range(a.warmup_epochs):
        epoch()
    t0 = time.perf_counter()
    c0 = time.thread_time()
    p0 = time.process_time()  # every thread's: the workers are threads
    batches = samples = 0
    for _ in range(a.epochs):
        samples += epoch()
    sync()
    secs = time.perf_counter() - t0
    cpu = time.thread_time() - c0  # the consumer thread's CPU time
    pcpu = time.process_time() - p0
    loader.close()
    json.dump({"epochs": a.epochs, "workers": a.workers, "batch_size": a.batch_size,
               "batches": batches, "samples": samples, "seconds": round(secs, 6),
               "samples_per_s": round(samples / secs, 1), "touch": touch, "device": a.device,
               "consumer_cpu_s": round(cpu, 6), "jpeg_decode": a.jpeg_decode,
               "process_cpu_s": round(pcpu, 6),
               "cpu_threads": round(pcpu / secs, 2)},
              sys.stdout)
    print()


if __name__ == "__main__":
    main()
