#!/usr/bin/env python3
"""ctest-times.py — the slowest tests of a ctest run; fails on one too slow.

Usage: ctest-times.py JUNIT_XML [--limit SECONDS] [--top N]

JUNIT_XML is what `ctest --output-junit FILE` wrote (scripts/test.sh asks
for it). Prints the N (default 8) slowest tests with their seconds, then,
for each test that ran longer than SECONDS (default 300: no single test may
take more than 5 minutes, whatever the machine), a line
"TOO SLOW: NAME took S s (limit L s)"; exit status 1 when there was one,
else 0. A test ctest killed at its TIMEOUT is over the limit too when its
TIMEOUT is (the suite's TIMEOUTs are guards, not the budget).
"""
import argparse
import os
import sys
import xml.etree.ElementTree as ET


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("junit")
    ap.add_argument("--limit", type=float, default=300.0)
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    name = os.path.basename(os.path.dirname(os.path.abspath(a.junit)))
    times = []
    for case in ET.parse(a.junit).getroot().iter("testcase"):
        try:
            t = float(case.get("time") or 0)
        except ValueError:
            sys.exit(f"ctest-times.py: {a.junit}: test {case.get('name')!r} has "
                     f"time {case.get('time')!r}, not a number of seconds")
        times.append((t, case.get("name")))
    times.sort(reverse=True)
    total = sum(t for t, _ in times)
    if times:
        print(f"{name}: the {min(a.top, len(times))} slowest of {len(times)} tests "
              f"({total:.0f} s of tests in all):")
        for t, test in times[:a.top]:
            print(f"  {t:7.1f} s  {test}")
    slow = [(t, test) for t, test in times if t > a.limit]
    for t, test in slow:
        print(f"TOO SLOW: {test} took {t:.0f} s (limit {a.limit:.0f} s)")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main())
