#!/usr/bin/env python3
"""Integration test: the third-party shards list as Python WebDataset 1.0.2 lists them.

For every shard in SHARED_TESTDATA/webdataset/ (none skipped), `wds ls --json
SHARD` must exit 0 and print exactly expected/SHARD.jsonl: the same keys in the
same order, the same field names, sizes and sha256, and __url__ equal to the
spec given.  Also checked: the `file://` spelling, all shards in one run (in
order, each sample with its own __url__), and loosely the human-readable
(`wds ls`) and `--summary` outputs.  The sample counts in the folder's README
table must agree with the expected listings.

Usage: expected_listings.py WDS_BINARY SHARED_TESTDATA
(SHARED_TESTDATA is ../shared/testdata, or its webdataset/ folder itself.)
Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`;
exits 1 on any failure.  Python 3 standard library only.
"""
import os
import re
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_listings  # noqa: E402

TIMEOUT_S = 120


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, name):
        print(f"ok {name}", flush=True)
        self.passed += 1

    def fail(self, name, *why):
        print(f"FAIL {name}", flush=True)
        for text in why:
            for line in str(text).splitlines():
                print(f"    {line}", flush=True)
        self.failed += 1

    def check(self, name, why):
        """why: None (pass) or a message / list of messages."""
        if not why:
            self.ok(name)
        else:
            self.fail(name, *(why if isinstance(why, list) else [why]))


def run_wds(wds, args):
    """Run wds; return (status, stdout bytes, stderr text, problem or None)."""
    try:
        p = subprocess.run([wds] + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, b"", "", f"`wds {' '.join(args)}` did not finish in {TIMEOUT_S} s"
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        return p.returncode, p.stdout, err, \
            f"`wds {' '.join(args)}` exited with status {p.returncode}, want 0\nstderr: {err[:1000]}"
    return p.returncode, p.stdout, err, None


def check_json(wds, expected, specs):
    """`wds ls --json SPECS` must print expected (samples carrying __url__)."""
    _, out, _, problem = run_wds(wds, ["ls", "--json"] + specs)
    if problem:
        return problem
    try:
        actual = compare_listings.parse_wds(out, "wds ls --json output")
    except compare_listings.ListingError as exn:
        return str(exn)
    return compare_listings.compare(expected, actual)


def with_url(samples, url):
    return [dict(s, __url__=url) for s in samples]


def number_re(n):
    return re.compile(rf"(?<![0-9]){n}(?![0-9])")


def word_re(word):
    return re.compile(rf"(?<![A-Za-z0-9_.]){re.escape(word)}(?![A-Za-z0-9_])")


def check_summary(wds, specs, expected):
    """Loose checks of `wds ls --summary`: totals and a count per extension."""
    _, out, _, problem = run_wds(wds, ["ls", "--summary"] + specs)
    if problem:
        return problem
    lines = out.decode("utf-8", "replace").splitlines()
    why = []

    def some_line(*patterns):
        return any(all(p.search(line) for p in patterns) for line in lines)

    counts = {}
    for sample in expected:
        for ext in sample["fields"]:
            counts[ext] = counts.get(ext, 0) + 1
    if not some_line(word_re("samples"), number_re(len(expected))):
        why.append(f"no line with `samples` and {len(expected)}")
    if not some_line(word_re("shards"), number_re(len(specs))):
        why.append(f"no line with `shards` and {len(specs)}")
    if not some_line(word_re("bytes"), re.compile(r"[0-9]")):
        why.append("no line with `bytes` and a number")
    for ext, n in sorted(counts.items()):
        if not some_line(word_re(ext), number_re(n)):
            why.append(f"no line with extension `{ext}` and its count {n}")
    if why:
        why.append("output:\n" + "\n".join(lines[:40]))
    return why


def check_human(wds, spec, expected):
    """`wds ls SPEC`: one line per sample, in order, each containing its key."""
    _, out, _, problem = run_wds(wds, ["ls", spec])
    if problem:
        return problem
    lines = out.decode("utf-8", "replace").splitlines()
    if len(lines) != len(expected):
        return f"{len(lines)} lines, want one per sample ({len(expected)}); first: {lines[:3]}"
    for i, (line, sample) in enumerate(zip(lines, expected)):
        if sample["__key__"] not in line:
            return f"line {i + 1} lacks key {sample['__key__']!r}: {line!r}"
    return None


def readme_counts(folder):
    """{shard: samples} from the README table (| shard | samples | fields |)."""
    counts = {}
    path = os.path.join(folder, "README.md")
    if not os.path.exists(path):
        return counts
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"^\|\s*([^|\s]+)\s*\|\s*([0-9]+)\s*\|", line)
            if m:
                counts[m.group(1)] = int(m.group(2))
    return counts


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    wds, testdata = os.path.abspath(argv[1]), argv[2]
    folder = testdata if os.path.isdir(os.path.join(testdata, "expected")) \
        else os.path.join(testdata, "webdataset")
    folder = os.path.abspath(folder)
    rep = Report()
    if not (os.path.isfile(wds) and os.access(wds, os.X_OK)):
        rep.fail("setup", f"wds binary {wds!r} not found or not executable")
        print(f"{rep.passed} passed, {rep.failed} failed")
        return 1
    expected_dir = os.path.join(folder, "expected")
    if not os.path.exists(testdata):
        # A checkout without ../shared beside it: skipped (ctest shows it).
        print(f"skipped: {testdata} not found (the shared test data)")
        return 77
    if not os.path.isdir(expected_dir):
        rep.fail("setup", f"{expected_dir}: no such folder (SHARED_TESTDATA={testdata!r})")
        print(f"{rep.passed} passed, {rep.failed} failed")
        return 1

    shards = sorted(n for n in os.listdir(folder)
                    if os.path.isfile(os.path.join(folder, n)) and not n.startswith(".")
                    and not n.startswith("README") and not n.startswith("LICENSE"))
    listed = sorted(n[:-len(".jsonl")] for n in os.listdir(expected_dir) if n.endswith(".jsonl"))
    # Skip none: every shard has a listing and every listing has its shard.
    rep.check("every_shard_has_a_listing",
              [f"no expected/{n}.jsonl" for n in shards if n not in listed] +
              [f"expected/{n}.jsonl has no shard" for n in listed if n not in shards] +
              (["no shards found in " + folder] if not shards else []))

    expected = {}
    for name in shards:
        if name not in listed:
            continue
        try:
            with open(os.path.join(expected_dir, name + ".jsonl"), "rb") as f:
                expected[name] = compare_listings.parse_reference(f.read(), f"expected/{name}.jsonl")
        except compare_listings.ListingError as exn:
            rep.fail(f"listing_{name}", exn)
    table = readme_counts(folder)
    rep.check("readme_counts_match_listings",
              [f"README says {table[n]} samples in {n}, expected/{n}.jsonl has {len(s)}"
               for n, s in expected.items() if n in table and table[n] != len(s)] +
              [f"README lists {n}, which is not in the folder" for n in table if n not in shards])

    for name, samples in expected.items():
        path = os.path.join(folder, name)
        if not samples:
            rep.fail(f"{name}", "the expected listing is empty")
            continue
        rep.check(f"{name}", check_json(wds, with_url(samples, path), [path]))
        url = "file://" + path
        rep.check(f"{name}_file_url", check_json(wds, with_url(samples, url), [url]))
        rep.check(f"{name}_human", check_human(wds, path, samples))
        rep.check(f"{name}_summary", check_summary(wds, [path], samples))

    names = list(expected)
    if names:
        paths = [os.path.join(folder, n) for n in names]
        everything = [s for n, p in zip(names, paths) for s in with_url(expected[n], p)]
        rep.check("all_shards_one_run", check_json(wds, everything, paths))
        rep.check("all_shards_summary", check_summary(wds, paths, everything))

    print(f"{rep.passed} passed, {rep.failed} failed")
    return 0 if rep.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
