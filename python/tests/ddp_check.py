"""ctest python_ddp (run.sh ddp): examples/train_ddp.py under torchrun, 2 CPU
ranks (gloo) on the demo's digits written to shards in a tmp dir with the wds
CLI. Checks that both ranks take the same number of steps and end with equal
weights, and that a run stopped after K steps (mid-epoch) and then resumed
with --resume ends with the weights of an uninterrupted run.
Not named test_*: the pytest suite (python_tree, python_pip) leaves it out.
Usage: python ddp_check.py SRC_DIR (environment: WDS_TEST_CLI)."""
import glob
import os
import re
import subprocess
import sys
import tempfile
import time

SRC = sys.argv[1]
WDS = os.environ["WDS_TEST_CLI"]
SCRIPT = os.path.join(SRC, "examples", "train_ddp.py")


# gloo's connection of the ranks at init_process_group, before any wds code
# runs, now and then fails on a loaded machine ("Connection closed by peer"
# in connectFullMesh); such a run is started once more, said on stdout.
GLOO_FLAKE = "connectFullMesh failed"


def run(*cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0 and GLOO_FLAKE in r.stdout:
        print(f"# gloo could not connect the ranks ({GLOO_FLAKE}): once more")
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        print(r.stdout)
        sys.exit(f"FAIL: {' '.join(cmd)}: exit {r.returncode}")
    return r.stdout


def train(spec, ckpt, *extra):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = run(sys.executable, "-m", "torch.distributed.run", "--standalone",
              "--nproc-per-node", "2", SCRIPT, "--train", spec, "--epochs", "2",
              "--batch-size", "32", "--workers", "1", "--shuffle-buffer", "200",
              "--seed", "3", "--checkpoint", ckpt, *extra, env=env)
    steps = dict(re.findall(r"^rank (\d): steps (\d+)", out, re.M))
    sha = dict(re.findall(r"^rank (\d): weights ([0-9a-f]{64})", out, re.M))
    if sorted(steps) != ["0", "1"] or sorted(sha) != ["0", "1"]:
        print(out)
        sys.exit("FAIL: both ranks should print their steps and weights")
    if not re.search(r"^epoch \d+: loss \d+\.\d+ accuracy \d\.\d+ \(\d+ samples\)$", out, re.M):
        print(out)
        sys.exit("FAIL: rank 0 should print each epoch's loss and accuracy by default")
    if steps["0"] != steps["1"] or sha["0"] != sha["1"]:
        print(out)
        sys.exit(f"FAIL: the ranks differ: steps {steps}, weights {sha}")
    return int(steps["0"]), sha["0"], out


def main():
    t0 = time.time()
    with tempfile.TemporaryDirectory() as d:
        run(sys.executable, os.path.join(SRC, "scripts", "make-digits.py"), os.path.join(d, "files"))
        run(WDS, "write", "-o", os.path.join(d, "digits-%04d.tar"), "--maxcount", "300",
            os.path.join(d, "files", "train"))
        n = len(glob.glob(os.path.join(d, "digits-*.tar")))
        spec = os.path.join(d, "digits-{%04d..%04d}.tar" % (0, n - 1))

        full, sha_full, out = train(spec, os.path.join(d, "full.pt"))
        per_epoch = int(re.search(r"(\d+) per epoch", out).group(1))
        print(f"# uninterrupted: {full} steps per rank ({per_epoch} per epoch), weights {sha_full}")
        k = per_epoch + per_epoch // 2  # mid-way through the second epoch
        part, _, _ = train(spec, os.path.join(d, "part.pt"), "--stop-after", str(k))
        rest, sha_resumed, out = train(spec, os.path.join(d, "part.pt"), "--resume")
        print(f"# stopped after {part} steps, resumed for {rest}: weights {sha_resumed}")
        if part != k or part + rest != full:
            print(out)
            sys.exit(f"FAIL: {part} + {rest} steps, not {k} + {full - k}")
        if sha_resumed != sha_full:
            print(out)
            sys.exit("FAIL: the resumed run's weights differ from the uninterrupted run's")
        elastic(d, spec)
    print(f"# ok ({time.time() - t0:.1f} s)")


def elastic(d, spec):
    """wds.Loader's state_dict saved on 2 ranks resumes on 3 and on 1
    (other batch size, workers): the keys before the stop and after it are
    every key of the epoch, each once as a valid row (the padding is
    marked invalid); equal steps on every new rank; the next epoch a fresh run's
    (elastic_ranks.py checks those)."""
    script = os.path.join(SRC, "python", "tests", "elastic_ranks.py")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    def torchrun(n, mode):
        return run(sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(n), script, mode, d, spec, env=env)
    torchrun(2, "save")
    old = []
    for r in (0, 1):
        old += open(os.path.join(d, f"old-{r}.txt")).read().split()
    # Every key of the epoch: a plain 1-rank read of it.
    import wds
    with wds.Loader(spec, "cls", 64, mode="plain", world_size=1, rank=0) as lo:
        every = [k for b in lo for k in b.sample_keys]
    for n in (3, 1):
        out = torchrun(n, "resume")
        new = []
        for r in range(n):
            new += open(os.path.join(d, f"new-{n}-{r}.txt")).read().split()
        got = old + new
        # valid keys only (elastic_ranks.py): the padding is marked invalid
        if set(got) != set(every) or len(got) != len(every):
            print(out)
            sys.exit(f"FAIL: 2 -> {n} ranks: {len(set(every) - set(got))} keys missing, "
                     f"{len(got) - len(set(got))} repeated")
        print(f"# elastic 2 -> {n} ranks: {len(old)} + {len(new)} valid keys, "
              f"each once")


if __name__ == "__main__":
    main()
