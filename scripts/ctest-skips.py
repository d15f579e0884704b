#!/usr/bin/env python3
"""ctest-skips.py — the skipped tests of a ctest run, each with its reason.

Usage: ctest-skips.py JUNIT_XML [NAME]

JUNIT_XML is what `ctest --output-junit FILE` wrote (scripts/test.sh asks
for it): each test's status and output. A skipped test (ctest's "not run":
its SKIP_RETURN_CODE) says why on lines starting with "SKIP:" (ctest itself
keeps no reason); for one without such a line, its lines that say "skip",
else its last line. Tests that passed but skipped a part (a GPU test on a
machine without one) print "SKIP" lines too and are listed after, with the
count of their summary line where they print one (tests/test.h's
"N passed, N failed, N skipped": "test_http (12 of 19 skipped)"). NAME
(default: the file's folder) heads the list. Prints nothing when nothing
was skipped. (Not Testing/Temporary/LastTest.log: a test that runs ctest
in the same build tree, even `ctest --show-only`, rewrites it.)
"""
import os
import re
import sys
import xml.etree.ElementTree as ET


# tests/test.h's last line.
SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed, (\d+) skipped$")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: ctest-skips.py JUNIT_XML [NAME]")
    path = sys.argv[1]
    name = sys.argv[2] if len(sys.argv) == 3 else \
        os.path.basename(os.path.dirname(os.path.abspath(path)))
    skipped, partly = [], []
    for case in ET.parse(path).getroot().iter("testcase"):
        out = case.findtext("system-out") or ""
        lines = [l.strip() for l in out.splitlines() if l.strip()]
        said = [l for l in lines if l.startswith("SKIP")]
        test = case.get("name")
        if case.find("skipped") is not None or case.get("status") == "notrun":
            why = said or [l for l in lines if "skip" in l.lower()] or lines[-1:] or \
                ["(the test printed nothing)"]
            skipped.append((test, why))
        elif said and case.find("failure") is None:
            counts = [m for m in map(SUMMARY.match, lines) if m]
            if counts:
                ok, bad, skip = (int(g) for g in counts[-1].groups())
                test = f"{test} ({skip} of {ok + bad + skip} skipped)"
            partly.append((test, said))
    if skipped:
        print(f"{name}: {len(skipped)} test{'s' if len(skipped) != 1 else ''} skipped:")
        for test, why in skipped:
            print(f"  {test}: {why[0]}")
            for w in why[1:]:
                print(f"  {' ' * len(test)}  {w}")
    if partly:
        print(f"{name}: passed, with parts skipped:")
        for test, why in sorted(partly):
            for i, w in enumerate(why):
                print(f"  {test if i == 0 else ' ' * len(test)}: {w}")


if __name__ == "__main__":
    main()
