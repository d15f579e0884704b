#!/usr/bin/env python3
"""readme.py — the code blocks of README.md and docs/*.md as a test (issues 16, 25).

Usage: readme.py WDS_BINARY WDS_TRAIN_BINARY README.md [PAGE.md ...]

Runs, file after file and in each file's order, in one scratch directory
with the two binaries first on PATH, on generated data (data-{000..099}.tar
with JPEG images and class ids, shard.tar.zst, @shards.txt, an image tree,
an ImageFolder tree, a JSON-lines manifest, digits-like PNG shards for
wds-train, the demo's build/demo-data/, ...):

- every command of the ```sh blocks (a command ends at a line without a
  trailing backslash; a trailing `# comment` is dropped): the `wds` and
  `wds-train` ones run; those that cannot run here are listed as skipped,
  each with the reason (the set-up scripts, installs, the network, an
  elided `...` command); `torchrun` commands run with this interpreter's
  torch (2 CPU ranks, gloo) where it has torch (ctest python_readme runs
  this script in the Python suite's venv), else they are skipped; a command of an unknown kind fails the
  test until this script knows how to run it or why it is skipped;
- every ```python block, with this interpreter and the build tree's
  extension (WDS_README_PYTHONPATH; skipped, with WDS_README_PY_SKIP's
  reason, where it cannot be imported); a block whose first line is
  `# needs: MODULE` is skipped when MODULE is not installed;
- every ```c block, a whole program (it has main(); a fragment fails the
  test), compiled against the build tree (its headers, libwds.so) with CC
  and WDS_README_CFLAGS, and run.

A block or command that exits non-zero fails the test, with its output.
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
    ("torchrun ", "several nodes, elided arguments (python_ddp runs examples/train_ddp.py)"),
    ("./scripts/setup.sh", "installs packages and builds: CI and the demo run it"),
    ("python3 -m venv", "makes a virtual environment for pip (package_wheel does)"),
    ("export PATH=", "puts the commands on PATH, as this test does"),
    ("sudo cmake --install", "installs the project (package_install installs it)"),
    ("srun ", "needs a Slurm cluster (ctest slurm runs srun on a Slurm of one node it starts)"),
    ("sbatch ", "needs a Slurm cluster (ctest slurm runs srun on a Slurm of one node it starts)"),
    ("scripts/gpu-prepare.sh", "builds the GPU checks' folder (tools_gpu_scripts; docs/performance.md)"),
    ("scripts/gpu-run.sh", "needs a GPU machine (tools_gpu_scripts runs its --dry-run)"),
]


def blocks(path):
    """(line, language, text) of every fenced block of a Markdown file."""
    out, lang, cur, start = [], None, None, 0
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        fence = re.match(r"^\s*```(\S*)", line)
        if fence:
            if cur is None:
                lang, cur, start = fence.group(1), [], n + 1
            else:
                out.append((start, lang, "".join(cur)))
                cur = None
            continue
        if cur is not None:
            cur.append(line)
    return out


def commands(readme):
    """(line number, command) of every command in the ```sh blocks."""
    return [(n, text) for n, kind, text in items(readme) if kind == "sh"]


def items(path):
    """(line, kind, text) in file order: a command of a ```sh block, or a
    whole ```python or ```c block."""
    out = []
    for start, lang, text in blocks(path):
        if lang in ("python", "c"):
            out.append((start, lang, text))
            continue
        if lang not in ("sh", "bash", "shell", "console"):
            continue
        cur, first = "", start
        for n, line in enumerate(text.split("\n"), start):
            text_line = strip_comment(line)
            if not cur:
                first = n
            if text_line.rstrip().endswith("\\"):
                cur += text_line.rstrip()[:-1] + " "
                continue
            cur += text_line
            if cur.strip():
                out.append((first, "sh", " ".join(cur.split())))
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


_TORCH = None


def have_torch():
    """Whether this interpreter has torch (python_readme's venv does)."""
    global _TORCH
    if _TORCH is None:
        _TORCH = subprocess.run([sys.executable, "-c", "import torch"],
                                capture_output=True).returncode == 0
    return _TORCH


def skip_reason(cmd):
    if cmd.startswith("mpirun ") and not re.search(r"(^|\s)\.\.\.(\s|$)", cmd):
        # Run where there is an mpirun and a wds-train built with MPI.
        if not shutil.which("mpirun"):
            return "needs mpirun (openmpi-bin)"
        # The scratch directory's link to the build's wds-train (main()).
        helptext = subprocess.run([os.path.abspath("bin/wds-train"), "--help"],
                                  capture_output=True, text=True).stdout
        return "" if "built with MPI)" in helptext else "needs a wds-train built with MPI"
    if cmd.startswith("torchrun ") and not re.search(r"(^|\s)\.\.\.(\s|$)", cmd):
        # Run with this interpreter's torch where there is one.
        return "" if have_torch() else \
            "needs torch and torchrun (python_readme runs it in the test venv)"
    for prefix, why in SKIP_PREFIXES:
        if cmd.startswith(prefix):
            return why
    if re.search(r"(^|\s)\.\.\.(\s|$)", cmd) and not cmd.startswith("wds "):
        return "an elided command ('...' stands for arguments shown elsewhere)"
    if re.search(r"https?://", cmd):
        return "needs the network"
    first = cmd.split()[0]
    if first not in ("wds", "wds-train", "torchrun", "mpirun"):
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
    # What ./scripts/demo.sh leaves in build/demo-data/ (the same names).
    os.makedirs("build/demo-data", exist_ok=True)
    for s in range(5):
        shutil.copy(f"digits-train-{s:04d}.tar", f"build/demo-data/digits-train-{s:04d}.tar")
    shutil.copy("digits-eval-0000.tar", "build/demo-data/digits-eval-0000.tar")


def run_sh(cmd, cmds, line, env):
    """Runs a `wds`/`wds-train` command; None when it ran, else the reason
    it is skipped."""
    # "wds CMD ... MORE": the arguments of the last `wds CMD` above.
    m = re.match(r"^(wds \S+) \.\.\.( .*)?$", cmd)
    if m:
        above = [c for n, c in cmds if n < line and c.startswith(m.group(1) + " ")
                 and " ... " not in c]
        if not above:
            return "an elided command with no full one above"
        cmd = above[-1] + (m.group(2) or "")
    # torchrun: this interpreter's (two ranks on the CPU with gloo).
    if cmd.startswith("torchrun "):
        cmd = f"{sys.executable} -m torch.distributed.run " + cmd[len("torchrun "):]
        env = dict(env, CUDA_VISIBLE_DEVICES="")
    # mpirun: Open MPI as root needs its two variables, and more processes
    # than cores --oversubscribe.
    if cmd.startswith("mpirun "):
        env = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   CUDA_VISIBLE_DEVICES="")
        # In an ASan build, the MPI library's own allocations kept past
        # MPI_Finalize are suppressed as for tools_train_mpi (tests/lsan-mpi.supp;
        # LeakSanitizer ignores this elsewhere).
        supp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lsan-mpi.supp")
        lsan = env.get("LSAN_OPTIONS", "")
        env["LSAN_OPTIONS"] = (lsan + ":" if lsan else "") + \
            f"fast_unwind_on_malloc=0:suppressions={os.path.normpath(supp)}"
        if "Open MPI" in subprocess.run(["mpirun", "--version"], capture_output=True,
                                        text=True).stdout:
            cmd = "mpirun --oversubscribe " + cmd[len("mpirun "):]
    # The train example's device: the CPU backend unless a GPU test asks.
    if (cmd.startswith("wds-train ") or cmd.startswith("mpirun ")) and "--device" not in cmd:
        cmd += " --device cpu"
    return subprocess.run(["bash", "-o", "pipefail", "-c", cmd + " >cmd.out"], env=env,
                          stderr=subprocess.PIPE, timeout=300), cmd


def python_block(text, env):
    """Runs a Python block; (None, reason) when it is skipped."""
    path = env.get("PYTHONPATH")
    if not path:
        return None, os.environ.get("WDS_README_PY_SKIP") or \
            "no Python extension in this build (WDS_README_PYTHONPATH unset)"
    m = re.match(r"# needs: (.+)", text)
    if m:
        for mod in (x.strip() for x in m.group(1).split(",")):
            if subprocess.run([sys.executable, "-c", f"import {mod}"], env=env,
                              capture_output=True).returncode != 0:
                return None, f"needs {mod}, which {sys.executable} lacks"
    open("block.py", "w").write(text)
    return subprocess.run([sys.executable, "block.py"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=300), None


def c_block(text, env, src, build):
    """Compiles a whole C program against the build tree and runs it."""
    if not re.search(r"\bint main\(", text):
        return subprocess.CompletedProcess(
            [], 1, b"a C block that is not a whole program (no main()): make it one, so "
            b"that it compiles and runs here"), None
    open("block.c", "w").write(text)
    cc = os.environ.get("CC", "cc")
    flags = os.environ.get("WDS_README_CFLAGS", "").split()
    p = subprocess.run([cc, "-std=c11", "-Wall", "-Werror", *flags,
                        "-I", os.path.join(src, "include"), "-I", os.path.join(build, "include"),
                        "block.c", "-o", "block", "-L", build, "-lwds",
                        f"-Wl,-rpath,{build}"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode != 0:
        return p, None
    return subprocess.run(["./block"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=300), None


def main():
    if len(sys.argv) < 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    wds, train = (os.path.abspath(a) for a in sys.argv[1:3])
    pages = [os.path.abspath(a) for a in sys.argv[3:]]
    src = os.path.dirname(pages[0])
    build = os.path.dirname(os.path.dirname(wds))  # BUILD/tools/wds
    try:
        from PIL import Image
    except ImportError:
        print("SKIP: no PIL (python3-pil) to make the example images")
        return 77
    cmds = commands(pages[0])
    if len(cmds) < 10:
        print(f"FAIL: only {len(cmds)} commands found in {pages[0]}'s sh blocks")
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
                    "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                    "PMIX_RANK", "PYTHONPATH"):
            env.pop(var, None)
        if os.environ.get("WDS_README_PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["WDS_README_PYTHONPATH"]
        fixtures(wds, Image)
        # Commands name the checkout's files from its root (examples/...).
        os.symlink(os.path.join(src, "examples"), "examples")
        for page in pages:
            name = os.path.relpath(page, src)
            page_cmds = commands(page)
            for line, kind, text in items(page):
                where = f"{name}:{line}"
                if kind == "python":
                    p, why = python_block(text, env)
                    what = "the Python block"
                elif kind == "c":
                    p, why = c_block(text, env, src, build)
                    what = "the C program"
                else:
                    why = skip_reason(text)
                    what = text
                    if why is None:
                        print(f"FAIL {where}: a command of an unknown kind; run it here or "
                              f"give the reason it cannot run: {text}")
                        failed += 1
                        continue
                    if not why:
                        r = run_sh(text, page_cmds, line, env)
                        if isinstance(r, str):
                            why = r
                        else:
                            p, run = r
                            what = run
                if why:
                    skipped.append((where, what if kind == "sh" else f"{what}", why))
                    continue
                if p.returncode == 0:
                    print(f"ok {where}: {what}")
                    passed += 1
                else:
                    print(f"FAIL {where}: exit {p.returncode}: {what}")
                    out = (p.stderr if kind == "sh" else p.stdout) or b""
                    for l in out.decode(errors="replace").splitlines()[-20:]:
                        print(f"    {l}")
                    failed += 1
    finally:
        os.chdir("/")
        if os.environ.get("WDS_TEST_KEEP"):
            print(f"# kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    for where, what, why in skipped:
        print(f"skip {where}: {what}\n    ({why})")
    print(f"{passed} passed, {failed} failed, {len(skipped)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
