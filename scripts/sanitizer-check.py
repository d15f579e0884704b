#!/usr/bin/env python3
"""Judges a compute-sanitizer log (memcheck with --leak-check full, or
racecheck) of the GPU tests: which reports are ours, which are NCCL's or
cuBLAS's own, and whether the check passes.

    sanitizer-check.py LOG [--json OUT]

Each report (a line "========= TEXT" and its indented backtrace lines) is
one of:
  leak       "Leaked N bytes at ...": its owner is the first frame of its
             allocation backtrace that is not the CUDA driver or runtime
             (libcuda, cudaMalloc...): in libnccl or an nccl* function:
             NCCL's; in libcublas / cublas*: cuBLAS's; else ours;
  probe      NCCL's kernel-image probe: cudaErrorNoKernelImageForDevice in
             ncclInitKernelsForDevice (tests/gpu/compute-sanitizer.supp.xml
             explains it and suppresses it where the tool takes the file);
  notready   cudaErrorNotReady from cudaEventQuery / cudaStreamQuery: the
             answer "not yet" of the polls our waits make (backend_cuda.cu's
             wait_event), a status, not an error, if the tool reports it;
  error      anything else the tool reports (an invalid access, an API
             error, a race hazard, the tool's own "Error:"): NCCL's when
             its text or frames name NCCL (its kernels: nccl*), else ours.
The check fails (exit 1) on any leak or error of ours, and when the log has
no summary line (the tool or the program did not finish). NCCL's and
cuBLAS's own leaks are counted and shown, not failed: they are what those
libraries keep for the process (our ranks destroy every communicator and
handle they make; a test that fails tears down too). Prints one line:
  PASS|FAIL ours: E errors, L leaks (B bytes); nccl: ...; probe errors: P
"""
import json
import re
import sys

PREFIX = re.compile(r"^========= ?(.*)$")
LEAK = re.compile(r"^Leaked (\d+) bytes")
FRAME = re.compile(r"Host Frame:\s*(.*)$")
RUNTIME_FN = re.compile(r"^(cu[A-Z]\w*|cuda[A-Z]\w*|__cuda\w*)")


def reports(lines):
    """(head text, [continuation lines]) per report."""
    out = []
    for raw in lines:
        m = PREFIX.match(raw.rstrip("\n"))
        if not m:
            continue
        body = m.group(1)
        if not body.strip():
            continue
        if body.startswith(" ") and out:
            out[-1][1].append(body.strip())
        else:
            out.append((body.strip(), []))
    return out


def frame_owner(frame):
    """'runtime', 'nccl', 'cublas' or 'ours' for one Host Frame text:
    "FUNC(ARGS) [in FILE:LINE] [0xADDR] in MODULE", or "[0xADDR] in MODULE"
    for a frame without a symbol."""
    module = frame.rsplit(" in ", 1)[-1].strip().lower() if " in " in frame else ""
    fn = frame.split("(")[0].split(" [")[0].strip()
    if "nccl" in module or fn.startswith("nccl"):
        return "nccl"
    if "cublas" in module or fn.lower().startswith("cublas"):
        return "cublas"
    if module.startswith(("libcuda.so", "libcudart")) or RUNTIME_FN.match(fn):
        return "runtime"
    if fn.startswith("[") or not fn:
        return "runtime"  # no symbol: the static CUDA runtime inside us
    return "ours"


def classify(head, rest):
    frames = [m.group(1) for m in (FRAME.search(x) for x in rest) if m]
    m = LEAK.match(head)
    if m:
        owner = "ours"
        for f in frames:
            o = frame_owner(f)
            if o != "runtime":
                owner = o
                break
        return "leak", owner, int(m.group(1))
    text = " ".join([head] + rest)
    if "cudaErrorNoKernelImageForDevice" in text and "ncclInitKernelsForDevice" in text:
        return "probe", "nccl", 0
    if "cudaErrorNoKernelImageForDevice" in text and not frames and "nccl" in text.lower():
        return "probe", "nccl", 0
    if "cudaErrorNotReady" in text or "CUDA_ERROR_NOT_READY" in text:
        return "notready", "", 0
    owner = "nccl" if "nccl" in text.lower() else "ours"
    return "error", owner, 0


INFO = re.compile(r"^(COMPUTE-SANITIZER|LEAK SUMMARY|ERROR SUMMARY|RACECHECK SUMMARY|"
                  r"Saved host backtrace|This can only be done|Target application returned|"
                  r"No (errors|hazards|leaks))")


def judge(lines):
    counts = {"ours": {"errors": 0, "leaks": 0, "bytes": 0},
              "nccl": {"errors": 0, "leaks": 0, "bytes": 0},
              "cublas": {"errors": 0, "leaks": 0, "bytes": 0},
              "probe": 0, "notready": 0, "summary": False, "examples": []}
    for head, rest in reports(lines):
        if INFO.match(head):
            if head.startswith(("ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY")):
                counts["summary"] = True
            continue
        kind, owner, nbytes = classify(head, rest)
        if kind == "probe":
            counts["probe"] += 1
            continue
        if kind == "notready":
            counts["notready"] += 1
            continue
        c = counts[owner]
        if kind == "leak":
            c["leaks"] += 1
            c["bytes"] += nbytes
        else:
            c["errors"] += 1
        if owner == "ours" and len(counts["examples"]) < 5:
            counts["examples"].append(" | ".join([head] + rest[:6]))
    ours = counts["ours"]
    counts["pass"] = counts["summary"] and ours["errors"] == 0 and ours["leaks"] == 0
    return counts


def line(c):
    def part(name):
        x = c[name]
        return f"{name}: {x['errors']} errors, {x['leaks']} leaks ({x['bytes']} bytes)"
    verdict = "PASS" if c["pass"] else "FAIL"
    tail = "" if c["summary"] else "; no summary line: the tool or the program did not finish"
    return (f"{verdict} {part('ours')}; {part('nccl')}; {part('cublas')}; "
            f"NCCL kernel-image probe errors: {c['probe']}"
            + (f"; cudaErrorNotReady polls: {c['notready']}" if c["notready"] else "") + tail)


def main(argv):
    if len(argv) not in (2, 4) or (len(argv) == 4 and argv[2] != "--json"):
        print("usage: sanitizer-check.py LOG [--json OUT]", file=sys.stderr)
        return 2
    with open(argv[1], errors="replace") as f:
        c = judge(f.readlines())
    print(line(c))
    for e in c["examples"]:
        print("  ours: " + e)
    if len(argv) == 4:
        with open(argv[3], "w") as f:
            json.dump(c, f, indent=1)
    return 0 if c["pass"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
