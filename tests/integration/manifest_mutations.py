#!/usr/bin/env python3
"""Robustness test for `wds write --manifest`'s JSON-lines parser.

Feeds a few hundred deterministic mutations of a valid manifest (bytes
flipped, inserted, deleted, lines cut, nesting, escapes, huge numbers, NULs,
invalid UTF-8) to `wds write` and checks it never crashes: every run exits
0 (a mutation that is still valid) or 1 with a "wds write:" message naming a
line. Under the ASan+UBSan build a memory error aborts the process, which
this test reports. Usage: manifest_mutations.py WDS_BINARY
"""
import os
import random
import subprocess
import sys
import tempfile

SEED_LINES = [
    b'{"__key__": "a/k0", "txt": "hello", "cls": 3, "json": {"x": [1, 2, {"y": null}]}}',
    b'{"__key__": "k1", "txt": "caf\\u00e9 \\ud83d\\ude00", "cls": -12.5e3, "flag": true, "skip": null}',
    b'{"__key__": "k2", "bin": "data.bin", "seg.png": "data.bin", "__meta__": "x"}',
    b'{"cls": 1, "__key__": "k3", "txt": "tab\\tnew\\nline \\"q\\" \\\\"}',
]
TOKENS = [b"{", b"}", b"[", b"]", b'"', b"\\", b"\\u", b"\\ud800", b":", b",",
          b"null", b"1e999999", b"-", b"\x00", b"\xff", b"\xc3", b" " * 3,
          b"[" * 80, b"{\"a\":" * 70, b"__key__", b"\n"]


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        pos = rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:
            data[pos:pos] = rng.choice(TOKENS)
        elif op == 2 and data:
            del data[pos:pos + rng.randint(1, 8)]
        else:
            data = data[:pos]
    return bytes(data)


def main():
    wds = sys.argv[1]
    rng = random.Random(20261122)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="wds-manifest-") as tmp:
        with open(os.path.join(tmp, "data.bin"), "wb") as f:
            f.write(os.urandom(100))
        man = os.path.join(tmp, "m.jsonl")
        for case in range(300):
            lines = [mutate(rng, l) if rng.random() < 0.5 else l
                     for l in SEED_LINES]
            with open(man, "wb") as f:
                f.write(b"\n".join(lines) + b"\n")
            out = os.path.join(tmp, "out", f"c{case}")
            os.makedirs(out)
            r = subprocess.run([wds, "write", "-o", os.path.join(out, "s-%04d.tar"),
                                "--manifest", man], capture_output=True, timeout=60)
            err = r.stderr.decode("utf-8", "replace")
            if r.returncode == 0:
                continue
            if r.returncode == 1 and err.startswith("wds write:") and "line" in err:
                if os.listdir(out):
                    print(f"FAIL case {case}: exit 1 but shards were written")
                    failed += 1
                continue
            failed += 1
            print(f"FAIL case {case}: exit {r.returncode}\n{err[-2000:]}")
            with open(man, "rb") as f:
                print(repr(f.read()[:2000]))
            if failed > 3:
                break
    print(f"{300 - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
