"""One rank of ddp_check.py's elastic resume check, under torchrun (gloo):
  save DIR SPEC    take 5 batches of a 2-rank job, write their valid keys
                   (DIR/old-RANK.txt) and rank 0's state_dict (DIR/state.json)
  resume DIR SPEC  load that state on this job's world (other batch size and
                   workers), read the rest of the epoch, write its valid keys
                   (DIR/new-WORLD-RANK.txt); every rank must take the same
                   steps, which len(loader) said; the next epoch must be a
                   fresh run's
Not named test_*: pytest leaves it out."""
import json
import os
import sys

import torch.distributed as dist

import wds


def loader(spec, batch, workers, **kw):
    # rank and world size: torch.distributed's
    return wds.Loader(spec, "cls", batch, mode="exact", seed=3, workers=workers,
                      shuffle_buffer=8, max_sample_bytes=1 << 16, **kw)


def main():
    mode, d, spec = sys.argv[1:4]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if mode == "save":
        with loader(spec, 4, 2) as lo:
            it = iter(lo)
            keys = []
            for _ in range(5):
                b = next(it)
                keys += [k for k, v in zip(b.keys, b.valid) if v]
                b.release()
            state = lo.state_dict()
        with open(os.path.join(d, f"old-{rank}.txt"), "w") as f:
            f.write("\n".join(keys) + "\n")
        if rank == 0:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump(state, f)
    else:
        with open(os.path.join(d, "state.json")) as f:
            state = json.load(f)
        with loader(spec, 3, 3) as lo:
            lo.load_state_dict(state)
            assert lo.elastic is not None and lo.elastic[0] == 2, lo.elastic
            want = len(lo)
            keys, steps = [], 0
            for b in lo:
                keys += [k for k, v in zip(b.keys, b.valid) if v]
                steps += 1
            assert steps == want, (steps, want)
            nxt = [b.keys for b in lo]
            assert lo.elastic is None
        with loader(spec, 3, 3, epoch=1) as fresh:
            assert nxt == [b.keys for b in fresh], "next epoch differs"
        all_steps = [None] * world
        dist.all_gather_object(all_steps, steps)
        assert len(set(all_steps)) == 1, all_steps
        with open(os.path.join(d, f"new-{world}-{rank}.txt"), "w") as f:
            f.write("\n".join(keys) + "\n")
        print(f"rank {rank}: {steps} steps after resuming on {world} ranks "
              f"from 2 ({state['batches']} batches of epoch {state['epoch']} "
              f"done)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
