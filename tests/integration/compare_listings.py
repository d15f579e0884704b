#!/usr/bin/env python3
"""Parse and compare sample listings (JSON lines), for the integration tests.

Two kinds of listing:
  * what `wds ls --json` prints: one object per line,
      {"__key__": K, "__url__": U, "fields": {EXT: {"size": N, "sha256": HEX}}}
    parsed strictly (parse_wds): anything else on stdout is an error;
  * a reference listing (expected/NAME.jsonl, or expect_from_tree.py output):
    the same shape, with "key" accepted for "__key__" and "__url__" optional
    (parse_reference).

compare() returns None when the listings agree, or a message describing the
first mismatch with both samples printed, so a failing test says what differs.

As a command:
  compare_listings.py --expected FILE --actual FILE [--url URL | --ignore-url]
                      [--prefix] [--min-count N] [--nonempty] [--label TEXT]
  exit 0: equal; 1: mismatch or malformed input (message on stdout).
Python 3 standard library only.
"""
import argparse
import json
import re
import sys

_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


class ListingError(Exception):
    """A listing that does not have the contract's shape."""


def _check_fields(fields, where):
    if not isinstance(fields, dict) or not fields:
        raise ListingError(f"{where}: \"fields\" must be a non-empty object, got {fields!r}")
    out = {}
    for ext, info in fields.items():
        if not isinstance(info, dict) or set(info) != {"size", "sha256"}:
            raise ListingError(f"{where}: field {ext!r} must be {{\"size\", \"sha256\"}}, got {info!r}")
        size, digest = info["size"], info["sha256"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ListingError(f"{where}: field {ext!r}: bad size {size!r}")
        if not isinstance(digest, str) or not _HEX64.match(digest):
            raise ListingError(f"{where}: field {ext!r}: bad sha256 {digest!r}")
        # The contract says HEX; compare digests case-insensitively.
        out[ext] = {"size": size, "sha256": digest.lower()}
    return out


def _lines(text, what):
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exn:
            raise ListingError(f"{what}: not valid UTF-8: {exn}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def parse_wds(text, what="wds output"):
    """Parse `wds ls --json` output strictly; return a list of samples."""
    samples = []
    for n, line in enumerate(_lines(text, what), 1):
        where = f"{what} line {n}"
        try:
            obj = json.loads(line)
        except ValueError as exn:
            raise ListingError(f"{where}: not a JSON object ({exn}): {line[:200]!r}") from None
        if not isinstance(obj, dict) or set(obj) != {"__key__", "__url__", "fields"}:
            got = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
            raise ListingError(f"{where}: want exactly the members __key__, __url__, fields; got {got}")
        if not isinstance(obj["__key__"], str) or not isinstance(obj["__url__"], str):
            raise ListingError(f"{where}: __key__ and __url__ must be strings")
        samples.append({"__key__": obj["__key__"], "__url__": obj["__url__"],
                        "fields": _check_fields(obj["fields"], where)})
    return samples


def parse_reference(text, what="reference listing"):
    """Parse a reference listing ("key" or "__key__"; "__url__" optional)."""
    samples = []
    for n, line in enumerate(_lines(text, what), 1):
        where = f"{what} line {n}"
        try:
            obj = json.loads(line)
        except ValueError as exn:
            raise ListingError(f"{where}: not JSON ({exn})") from None
        key = obj.get("__key__", obj.get("key"))
        if not isinstance(key, str):
            raise ListingError(f"{where}: no key")
        sample = {"__key__": key, "fields": _check_fields(obj.get("fields"), where)}
        if "__url__" in obj:
            sample["__url__"] = obj["__url__"]
        samples.append(sample)
    return samples


def _show(sample):
    return json.dumps(sample, sort_keys=True, ensure_ascii=False)


def _diff_sample(exp, act):
    """Name what differs between two samples, or return None."""
    if exp["__key__"] != act["__key__"]:
        return f"key differs: expected {exp['__key__']!r}, got {act['__key__']!r}"
    ef, af = exp["fields"], act["fields"]
    if set(ef) != set(af):
        return (f"field names differ: expected {sorted(ef)}, got {sorted(af)}"
                f" (missing {sorted(set(ef) - set(af))}, extra {sorted(set(af) - set(ef))})")
    for ext in sorted(ef):
        if ef[ext]["size"] != af[ext]["size"]:
            return f"field {ext!r}: size expected {ef[ext]['size']}, got {af[ext]['size']}"
        if ef[ext]["sha256"] != af[ext]["sha256"]:
            return f"field {ext!r}: sha256 expected {ef[ext]['sha256']}, got {af[ext]['sha256']}"
    return None


def compare(expected, actual, url=None, ignore_url=False, prefix=False, min_count=0):
    """Compare two parsed listings; return None if they agree, else a message.

    url: every actual sample must have this __url__.  Otherwise, unless
    ignore_url, an expected sample that carries __url__ must match it.
    prefix: actual may be a leading part of expected (at least min_count).
    """
    for i, act in enumerate(actual):
        if i >= len(expected):
            return (f"sample #{i}: unexpected extra sample (expected {len(expected)} samples,"
                    f" got {len(actual)})\n  got:      {_show(act)}")
        exp = expected[i]
        why = _diff_sample(exp, act)
        if why is None and not ignore_url:
            want = url if url is not None else exp.get("__url__")
            if want is not None and act.get("__url__") != want:
                why = f"__url__ expected {want!r}, got {act.get('__url__')!r}"
        if why is not None:
            before = f" (after key {expected[i - 1]['__key__']!r})" if i else " (first sample)"
            return (f"sample #{i}{before}: {why}\n  expected: {_show(exp)}\n  got:      {_show(act)}")
    if prefix:
        if len(actual) < min_count:
            return f"expected at least {min_count} samples, got {len(actual)}"
    elif len(actual) < len(expected):
        return (f"sample #{len(actual)}: missing (expected {len(expected)} samples,"
                f" got {len(actual)})\n  expected: {_show(expected[len(actual)])}")
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--expected", required=True, help="reference listing (JSON lines)")
    ap.add_argument("--actual", required=True, help="`wds ls --json` stdout")
    ap.add_argument("--url", help="every actual sample must have this __url__")
    ap.add_argument("--ignore-url", action="store_true", help="do not compare __url__")
    ap.add_argument("--prefix", action="store_true",
                    help="actual may be a leading part of expected")
    ap.add_argument("--min-count", type=int, default=0, help="with --prefix: fewest samples")
    ap.add_argument("--nonempty", action="store_true",
                    help="fail if the expected listing is empty (two empty outputs are no proof)")
    ap.add_argument("--label", default="", help="prefix for messages")
    args = ap.parse_args(argv)
    label = f"{args.label}: " if args.label else ""
    try:
        with open(args.expected, "rb") as f:
            expected = parse_reference(f.read(), args.expected)
        with open(args.actual, "rb") as f:
            actual = parse_wds(f.read(), args.actual)
    except (OSError, ListingError) as exn:
        print(f"{label}{exn}")
        return 1
    if args.nonempty and not expected:
        print(f"{label}{args.expected}: no samples; nothing to compare against")
        return 1
    msg = compare(expected, actual, url=args.url, ignore_url=args.ignore_url,
                  prefix=args.prefix, min_count=args.min_count)
    if msg is not None:
        print(f"{label}{msg}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
