#!/usr/bin/env python3
"""readme.py — README.md's examples as a test (issue 16).

Usage: readme.py WDS_BINARY WDS_TRAIN_BINARY README.md

Takes every command of README.md's ```sh blocks (a command ends at a line
without a trailing backslash; a trailing `# comment` is dropped), makes the
files they name on generated data (data-{000..099}.tar with JPEG images and
class ids, shard.tar.zst, @shards.txt, an image tree, an ImageFolder tree, a
JSON-lines manifest, digits-like PNG shards for wds-train, ...), and runs
each `wds`/`wds-train` command, in README order, in one scratch directory
with the two binaries first on PATH. A command that exits non-zero fails
the test, with its output. Commands that cannot run here are listed as
skipped, each with the reason (the set-up scripts, installs, the network,
an elided `...` command, torchrun). The README may grow: new commands are
picked up, and a new command of an unknown kind fails the test until this
script knows how to run it or why it is skipped.

Exit status: 0 all ran, 1 a failure, 77 skipped (no PIL to make images).
"""
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

# Commands that cannot run on generated data here, by their beginning: the
# reason is printed for each.
SKIP_PREFIXES = [
    ("./scripts/demo.sh", "installs packages and builds: CI and the demo run it"),
    ("./scripts/test.sh", "runs this whole suite (CI runs it)"),
    ("cmake ", "configures, builds or installs the project (package_install builds it)"),
    ("(cd build && cpack", "packages an installed build (package_install)"),
    ("pip ", "builds and installs the Python package (python_pip)"),
    ("torchrun ", "needs torch and torchrun (python_ddp runs examples/train_ddp.py)"),
    ("wds-train --nodes", "several nodes (CUDA): test_rendezvous and tools_train_gpu cover it"),
    ("scripts/gpu-prepare.sh", "builds the GPU checks' folder (tools_gpu_scripts; docs/performance.md)"),
    ("scripts/gpu-run.sh", "needs a GPU machine (tools_gpu_scripts runs its --dry-run)"),
]


def commands(readme):
    """(line number, command) of every command in the ```sh blocks."""
    out, block, cur, start = [], None, "", 0
    for n, line in enumerate(open(readme, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        fence = re.match(r"^\s*```(\S*)", line)
        if fence:
            block = None if block is not None else fence.group(1)
            cur = ""
            continue
        if block not in ("sh", "bash", "shell", "console"):
            continue
        text = strip_comment(line)
        if not cur:
            start = n
        if text.rstrip().endswith("\\"):
            cur += text.rstrip()[:-1] + " "
            continue
        cur += text
        if cur.strip():
            out.append((start, " ".join(cur.split())))
        cur = ""
    return out


def strip_comment(line):
    """The line without a shell comment (a '#' after a blank, outside
    quotes)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line


def skip_reason(cmd):
    for prefix, why in SKIP_PREFIXES:
        if cmd.startswith(prefix):
            return why
    if re.search(r"(^|\s)\.\.\.(\s|$)", cmd) and not cmd.startswith("wds "):
        return "an elided command ('...' stands for arguments shown elsewhere)"
    if re.search(r"https?://", cmd):
        return "needs the network"
    first = cmd.split()[0]
    if first not in ("wds", "wds-train"):
        return None  # unknown: the caller fails
    return ""


def jpeg(Image, value, size=8):
    img = Image.new("RGB", (size, size), (value * 23 % 256, value * 57 % 256, 128))
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def png_gray(Image, value, size=8):
    img = Image.new("L", (size, size), 0)
    for x in range(size):
        img.putpixel((x, value % size), 255)  # a learnable row per class
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def write_tar(path, samples):
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for key, fields in samples:
            for ext, data in fields.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                info.mtime = 0
                t.addfile(info, io.BytesIO(data))


def fixtures(wds, Image):
    """The files README's commands name, small."""
    pics = [jpeg(Image, v) for v in range(10)]
    n = 0
    for s in range(100):  # data-{000..099}.tar: 2 samples each, jpg + cls
        samples = []
        for _ in range(2):
            samples.append((f"s{n:05d}", {"jpg": pics[n % 10], "cls": str(n % 10).encode()}))
            n += 1
        write_tar(f"data-{s:03d}.tar", samples)
    for s in range(10):  # a-{000..009}.tar
        write_tar(f"a-{s:03d}.tar", [(f"a{s}_{i}", {"jpg": pics[i], "cls": b"%d" % i})
                                     for i in range(3)])
    shutil.copy("data-000.tar", "extra.tar")
    subprocess.run(["zstd", "-q", "-f", "data-001.tar", "-o", "shard.tar.zst"], check=True)
    with open("shards.txt", "w") as f:
        f.write("# shards, one spec a line\ndata-{000..009}.tar\n")
    for d, name in (("images/cats", "c1"), ("images/cats", "c2"), ("images/dogs", "d1")):
        os.makedirs(d, exist_ok=True)
        open(f"{d}/{name}.jpg", "wb").write(pics[len(name)])
        open(f"{d}/{name}.cls", "w").write("1")
    for c, cls in enumerate(("cat", "dog", "fish")):
        os.makedirs(f"imgs/train/{cls}", exist_ok=True)
        for i in range(4):
            open(f"imgs/train/{cls}/img_{i:03d}.JPEG", "wb").write(pics[c * 3 + i % 3])
    # The README writes into out/, which it assumes exists (wds write does
    # not make directories: "cannot create out/...: No such file or
    # directory").
    os.makedirs("out", exist_ok=True)
    os.makedirs("manifest_files", exist_ok=True)
    with open("samples.jsonl", "w") as f:
        for i in range(5):
            open(f"manifest_files/{i}.jpg", "wb").write(pics[i])
            f.write(json.dumps({"__key__": f"m{i}", "jpg": f"manifest_files/{i}.jpg",
                                "cls": i}) + "\n")
    # wds-train's example: 8x8 gray digits-like images, 10 classes.
    n = 0
    for s in range(5):
        write_tar(f"digits-train-{s:04d}.tar",
                  [(f"t{n + i:05d}", {"png": png_gray(Image, (n + i) % 10),
                                      "cls": b"%d" % ((n + i) % 10)}) for i in range(40)])
        n += 40
    write_tar("digits-eval-0000.tar",
              [(f"e{i:05d}", {"png": png_gray(Image, i % 10), "cls": b"%d" % (i % 10)})
               for i in range(40)])


def main():
    if len(sys.argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    wds, train, readme = (os.path.abspath(a) for a in sys.argv[1:])
    try:
        from PIL import Image
    except ImportError:
        print("SKIP: no PIL (python3-pil) to make the example images")
        return 77
    cmds = commands(readme)
    if len(cmds) < 10:
        print(f"FAIL: only {len(cmds)} commands found in {readme}'s sh blocks")
        return 1
    # The README opens with the two commands a new user runs first.
    if [c.split()[0] for _, c in cmds[:2]] != ["./scripts/demo.sh", "./scripts/test.sh"]:
        print(f"FAIL: README.md's first two commands are not ./scripts/demo.sh and "
              f"./scripts/test.sh: {cmds[:2]}")
        return 1
    tmp = tempfile.mkdtemp(prefix="wds-readme.")
    failed = passed = 0
    skipped = []
    try:
        os.chdir(tmp)
        bindir = os.path.join(tmp, "bin")
        os.makedirs(bindir)
        os.symlink(wds, os.path.join(bindir, "wds"))
        os.symlink(train, os.path.join(bindir, "wds-train"))
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""))
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
            env.pop(var, None)
        fixtures(wds, Image)
        for line, cmd in cmds:
            why = skip_reason(cmd)
            if why is None:
                print(f"FAIL README.md:{line}: a command of an unknown kind; run it here or "
                      f"give the reason it cannot run: {cmd}")
                failed += 1
                continue
            if why:
                skipped.append((line, cmd, why))
                continue
            # "wds CMD ... MORE": the arguments of the last `wds CMD` above.
            m = re.match(r"^(wds \S+) \.\.\.( .*)?$", cmd)
            if m:
                above = [c for _, c in cmds[:cmds.index((line, cmd))]
                         if c.startswith(m.group(1) + " ") and " ... " not in c]
                if not above:
                    skipped.append((line, cmd, "an elided command with no full one above"))
                    continue
                cmd = above[-1] + (m.group(2) or "")
            # The train example's device: the CPU backend unless a GPU test asks.
            run = cmd
            if cmd.startswith("wds-train ") and "--device" not in cmd:
                run = cmd + " --device cpu"
            p = subprocess.run(["bash", "-o", "pipefail", "-c", run + " >cmd.out"], env=env,
                               stderr=subprocess.PIPE, timeout=300)
            if p.returncode == 0:
                print(f"ok README.md:{line}: {cmd}")
                passed += 1
            else:
                print(f"FAIL README.md:{line}: exit {p.returncode}: {run}")
                for l in p.stderr.decode(errors="replace").splitlines()[:20]:
                    print(f"    {l}")
                failed += 1
    finally:
        os.chdir("/")
        if os.environ.get("WDS_TEST_KEEP"):
            print(f"# kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for line, cmd, why in skipped:
        print(f"skip README.md:{line}: {cmd}\n    ({why})")
    print(f"{passed} passed, {failed} failed, {len(skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
