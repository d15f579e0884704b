#!/usr/bin/env python3
"""ctest-skips.py — the skipped tests of a ctest run, each with its reason.

Usage: ctest-skips.py CTEST_OUTPUT BUILD_DIR

CTEST_OUTPUT is what ctest printed (scripts/test.sh tees it): its "The
following tests did not run" list names the skipped tests. Their output is
in BUILD_DIR/Testing/Temporary/LastTest.log, where each test says why on
lines starting with "SKIP:" (ctest itself keeps no reason; for a test
without one, its lines that say "skip", else its last line). Tests that
passed but skipped a part (a GPU test on a machine without one) print such
lines too and are listed after. Prints nothing when nothing was skipped.
"""
import os
import re
import sys


def outputs(log):
    """{test name: its output lines} from a LastTest.log."""
    out, name, lines, inside = {}, None, [], False
    for line in open(log, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        m = re.match(r"^\d+/\d+ Test: (.+)$", line)
        if m:
            name, lines, inside = m.group(1), [], False
            continue
        if name is None:
            continue
        if line == "Output:":
            inside = None  # the dashes line follows
            continue
        if inside is None:
            inside = True
            continue
        if line == "<end of output>":
            out[name] = lines
            name, inside = None, False
            continue
        if inside:
            lines.append(line)
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: ctest-skips.py CTEST_OUTPUT BUILD_DIR")
    printed, build = sys.argv[1], sys.argv[2]
    skipped = []
    for line in open(printed, encoding="utf-8", errors="replace"):
        m = re.match(r"^\s*\d+ - (\S+) \(Skipped\)\s*$", line)
        if m:
            skipped.append(m.group(1))
    log = os.path.join(build, "Testing", "Temporary", "LastTest.log")
    out = outputs(log) if os.path.exists(log) else {}

    def reasons(name):
        return [l.strip() for l in out.get(name, []) if l.strip().startswith("SKIP")]

    def why_skipped(name):
        """Its SKIP: lines; else its lines that say "skip" (some tests end
        with "...: skipped"); else its last line."""
        lines = [l.strip() for l in out.get(name, []) if l.strip()]
        said = reasons(name) or [l for l in lines if "skip" in l.lower()]
        return said or lines[-1:] or ["(the test printed nothing)"]

    name = os.path.basename(os.path.abspath(build))
    if skipped:
        print(f"{name}: {len(skipped)} test{'s' if len(skipped) != 1 else ''} "
              "skipped:")
        for t in skipped:
            why = why_skipped(t)
            print(f"  {t}: {why[0]}")
            for w in why[1:]:
                print(f"  {' ' * len(t)}  {w}")
    partly = [t for t in sorted(out) if t not in skipped and reasons(t)]
    if partly:
        print(f"{name}: passed, with parts skipped:")
        for t in partly:
            for i, w in enumerate(reasons(t)):
                print(f"  {t if i == 0 else ' ' * len(t)}: {w}")


if __name__ == "__main__":
    main()
