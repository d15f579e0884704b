#!/usr/bin/env python3
"""Generates the brace-expansion case table of tests/test_spec.c from the real
Python braceexpand 0.1.7 (the package WebDataset uses), so that the expected
URL lists are Python's output, not guesses.

    /tmp/wdsref/bin/python tests/gen_brace_cases.py            # print the rows
    /tmp/wdsref/bin/python tests/gen_brace_cases.py --write tests/test_spec.c

--write replaces the text between the BEGIN/END GENERATED markers.

Each case is (pattern, max_urls, expected message substring or None). Error
cases must fail in Python as well: UnbalancedBracesError and ValueError (a
number of more than 4300 digits) become WDS_ERR_SPEC; a pattern Python
expands to more than max_urls URLs becomes WDS_ERR_LIMIT. The substring is
ours (Python's messages do not name the position).
"""
import itertools
import os
import sys

import braceexpand
from braceexpand import UnbalancedBracesError

assert braceexpand.__version__ == "0.1.7", braceexpand.__version__

BEGIN = "/* BEGIN GENERATED BRACE CASES (tests/gen_brace_cases.py) */\n"
END = "/* END GENERATED BRACE CASES */\n"

# (pattern, max_urls (0 = default), message substring for an error, or None).
CASES = [
    # plain text
    ("", 0, None),
    ("data.tar", 0, None),
    ("pipe:curl -s http://x/a.tar", 0, None),
    # numeric ranges and zero padding
    ("a-{0..3}.tar", 0, None),
    ("shard-{000..012}.tar", 0, None),
    ("{07..10}", 0, None),
    ("{1..010}", 0, None),
    ("{001..3}", 0, None),
    ("{0..0}", 0, None),
    ("{00..0}", 0, None),
    ("{0..00}", 0, None),
    ("{-0..05}", 0, None),
    ("{-05..0}", 0, None),
    ("{-05..05..5}", 0, None),
    ("{0..-0}", 0, None),
    ("{9..11}", 0, None),
    ("{098..101}", 0, None),
    ("{0000..2}", 0, None),
    # steps
    ("{0..10..2}", 0, None),
    ("{1..10..3}", 0, None),
    ("{0..10..0}", 0, None),
    ("{0..10..-3}", 0, None),
    ("{10..0..3}", 0, None),
    ("{10..0..-3}", 0, None),
    ("{0..10..100}", 0, None),
    ("{0..10..007}", 0, None),
    ("{-1..-10..4}", 0, None),
    # descending and negative
    ("{5..1}", 0, None),
    ("{2..-1}", 0, None),
    ("{-3..3}", 0, None),
    ("{-3..-1}", 0, None),
    ("{-1..-3}", 0, None),
    ("{3..-3..2}", 0, None),
    # big numbers (Python ints are unbounded)
    ("{18446744073709551615..18446744073709551617}", 0, None),
    ("{-9223372036854775809..-9223372036854775807}", 0, None),
    ("{99999999999999999999999999..100000000000000000000000001..2}", 0, None),
    ("{0..5..99999999999999999999999999999999}", 0, None),
    # (numbers of 4300 digits and more are tested in test_spec.c itself)
    # letter ranges
    ("{a..e}", 0, None),
    ("{e..a}", 0, None),
    ("{a..e..2}", 0, None),
    ("{a..g..-2}", 0, None),
    ("{A..z..5}", 0, None),
    ("{Z..a}", 0, None),
    ("{a..Z}", 0, None),
    ("{x..C}", 0, None),
    ("{z..A..-25}", 0, None),
    ("{a..Z..3}", 0, None),
    ("{A..A}", 0, None),
    ("{a..b..0}", 0, None),
    ("{a..z..100}", 0, None),
    # not ranges: literal text
    ("{1..a}", 0, None),
    ("{a..1}", 0, None),
    ("{1..}", 0, None),
    ("{..1}", 0, None),
    ("{1..2..}", 0, None),
    ("{1...2}", 0, None),
    ("{1..2..3..4}", 0, None),
    ("{aa..b}", 0, None),
    ("{+1..3}", 0, None),
    ("{1 ..3}", 0, None),
    ("{a}", 0, None),
    ("{}", 0, None),
    ("{{}}", 0, None),
    ("x{a}y", 0, None),
    ("{a..}", 0, None),
    ("{-a..c}", 0, None),
    # the regex "$" matches before a final newline
    ("{1..3\n}", 0, None),
    ("{a..c\n}", 0, None),
    ("{1..3\n\n}", 0, None),
    # comma lists, empty alternatives, several groups
    ("{a,b,c}", 0, None),
    ("{,a}", 0, None),
    ("{a,}", 0, None),
    ("{,}", 0, None),
    ("{,,}", 0, None),
    ("a{b,c}d{e,f}", 0, None),
    ("{a,b}{1..3}", 0, None),
    ("{1..2}{a..b}{x,y}", 0, None),
    ("index.html{,.backup}", 0, None),
    ("s3://bucket/{train,val}/{0000..0002}.tar", 0, None),
    # nesting
    ("python{2.{5..7},3.{2,3}}", 0, None),
    ("{a,{b,c}}", 0, None),
    ("{{a,b},{c,d}}{1,2}", 0, None),
    ("{a{b,c}}", 0, None),
    ("{a{1..3}b}", 0, None),
    ("{x,{1..3}{a,b}}", 0, None),
    ("{{{a}}}", 0, None),
    ("{a,{}}", 0, None),
    ("{a,{b}}", 0, None),
    ("{{1..2},{a..b}}-{0..1}", 0, None),
    ("{" * 64 + "}" * 64, 0, None),
    ("{" * 64 + "a,b" + "}" * 64, 0, None),
    # a '}' at depth 0 takes the depth negative; a '{' brings it back
    ("}{", 0, None),
    ("}{a}{", 0, None),
    ("a}b{c", 0, None),
    ("{a}}{", 0, None),
    ("}{{a,b}", 0, None),
    # escapes (escape=True): "\\" skips the next char, then _flatten()
    # removes one level of backslashes per nested product
    ("\\{a,b\\}", 0, None),
    ("{a\\,b}", 0, None),
    ("{a\\,b,c}", 0, None),
    ("{a,b\\}}", 0, None),
    ("x\\y", 0, None),
    ("a\\\\b", 0, None),
    ("a\\", 0, None),
    ("{a,b}\\", 0, None),
    ("{1..3}\\\\", 0, None),
    ("{x\\\\\\\\y,b}", 0, None),
    ("{{a,b}\\\\}", 0, None),
    ("{{a,b}\\\\\\\\}", 0, None),
    ("{a\\\\,b}", 0, None),
    ("\\\n{a,b}", 0, None),
    ("{a,b\\\n}", 0, None),
    ("{1\\..3}", 0, None),
    ("{1..3\\}}", 0, None),
    ("\\{1..3\\}", 0, None),
    # not special here: "::" and "${}" (wds_brace_expand is one pattern)
    ("a::b", 0, None),
    ("${X}{1,2}", 0, None),
    # unbalanced braces (UnbalancedBracesError in Python)
    ("a-{0..3.tar", 0, "unbalanced brace at position 2 in \"a-{0..3.tar\""),
    ("{", 0, "unbalanced brace at position 0"),
    ("}", 0, "unbalanced brace at position 0"),
    ("a}", 0, "unbalanced brace at position 1"),
    ("{1{2,3}", 0, "unbalanced brace at position 0"),
    ("{a,b}}", 0, "unbalanced brace at position 5"),
    ("}{}", 0, "unbalanced brace at position 2"),
    ("x{a,b}y{", 0, "unbalanced brace at position 7"),
    ("\\{a,b}", 0, "unbalanced brace at position 5"),
    ("{a,b\\}", 0, "unbalanced brace at position 0"),
    ("{a,b}\\\\}", 0, "unbalanced brace at position 7"),
    # the URL limit, checked before anything is allocated
    ("{a,b}{1..3}", 6, None),
    ("{a,b}{1..3}", 5, "would make 6 URLs, over the limit of 5"),
    ("{0..9}", 1, "would make 10 URLs, over the limit of 1"),
    ("x", 1, None),
]

# Patterns Python expands but we refuse by design: nesting is bounded so
# that recursion on hostile input is bounded (Python itself fails with
# RecursionError a few hundred levels deep). (pattern, max_urls, status,
# substring).
REFUSED = [
    ("{" * 65 + "}" * 65, 0, "WDS_ERR_SPEC",
     "braces nested more than 64 deep at position 64"),
    ("a{b," + "{" * 70 + "}" * 70 + "}", 0, "WDS_ERR_SPEC",
     "nested more than 64 deep at position 67"),
]

# Patterns too big for Python to expand: (pattern, max_urls, substring).
HUGE = [
    ("{0..999999999}{0..999999999}", 0,
     "would make 1000000000000000000 URLs, over the limit of 10000000"),
    ("{0..10000000}", 0, "would make 10000001 URLs, over the limit of 10000000"),
    ("{0..99999999999999999999999999999}", 0,
     "would make at least 18446744073709551615 URLs"),
    ("{0..999}" * 8, 0, "would make at least 18446744073709551615 URLs"),
    ("{a..z}{a..z}{a..z}{a..z}{a..z}{a..z}", 0,
     "would make 308915776 URLs, over the limit of 10000000"),
    ("{" + ",".join(["{0..99}"] * 100) + "}{0..999}", 1000,
     "would make 10000000 URLs, over the limit of 1000"),
]


# wds_spec_expand() cases, compared with WebDataset 1.0.2's expand_urls()
# (split on "::", ${NAME} from WDS_NAME up to 10 passes, braceexpand) run
# part by part, because we skip empty parts where WebDataset yields "".
SPEC_ENV = [
    ("WDS_ROOT", "/data/set"),
    ("WDS_SHARDS", "{000..002}"),
    ("WDS_LOOP", "${LOOP}"),
    ("WDS_A", "${B}"),
    ("WDS_B", "x{1,2}"),
    ("WDS_PAIR", "a::b"),
    ("WDS_EMPTY", ""),
    ("WDS_DBL", "${DBL}${DBL}"),
    ("WDS_ESC", "\\{q,r\\}"),
]
SPEC_UNSET = ["WDS_NOPE"]
SPEC_CASES = [
    ("${ROOT}/train-${SHARDS}.tar", None),
    ("${ROOT}/{train,val}-{0..1}.tar::${ROOT}/extra.tar", None),
    ("a::b", None),
    ("a::::b", None),
    ("::a::", None),
    ("a:::b", None),
    (":a:", None),
    ("", None),
    ("::", None),
    ("{a,b}::{1..2}", None),
    ("${LOOP}", None),
    ("${A}", None),
    ("p/${PAIR}", None),
    ("${}", None),
    ("$", None),
    ("${A-B}", None),
    ("$${A}", None),
    ("${${A}}", None),
    ("x${EMPTY}y", None),
    ("${ESC}", None),
    ("${NOPE}", "missing environment variable WDS_NOPE"),
    ("ok::${NOPE}", "WDS_NOPE"),
    ("{a::b}", "unbalanced brace at position 0 in \"{a\""),
    ("a-{0..3.tar::b", "unbalanced brace at position 2 in \"a-{0..3.tar\""),
]


def c_str(s):
    """A C string literal for s (UTF-8), safe for any byte, split over lines
    when long (adjacent literals concatenate)."""
    toks = []
    for b in s.encode("utf-8"):
        c = chr(b)
        if c in '"\\':
            toks.append("\\" + c)
        elif c == "?":
            toks.append("\\?")  # no trigraphs
        elif 0x20 <= b < 0x7F:
            toks.append(c)
        else:
            toks.append("\\%03o" % b)  # always 3 digits: safe before digits
    lines, cur = [], ""
    for t in toks:
        if len(cur) + len(t) > 48:
            lines.append(cur)
            cur = ""
        cur += t
    lines.append(cur)
    return "\n      ".join('"%s"' % line for line in lines)


def python_result(pattern, max_urls):
    limit = max_urls or 10_000_000
    try:
        urls = list(itertools.islice(braceexpand.braceexpand(pattern), limit + 1))
    except UnbalancedBracesError:
        return "WDS_ERR_SPEC", None
    except ValueError:
        return "WDS_ERR_SPEC", None
    if len(urls) > limit:
        return "WDS_ERR_LIMIT", None
    return "WDS_OK", urls


def wrap(items, first, indent, end):
    """Joins C items with ", " greedily within 80 columns."""
    lines, cur = [], first
    for i, item in enumerate(items):
        piece = item + (", " if i + 1 < len(items) else end)
        for k, part in enumerate(piece.split("\n")):
            part = part.lstrip() if k else part
            if k:
                lines.append(cur.rstrip())
                cur = indent
            if len(cur) + len(part.rstrip()) > 80 and cur.strip():
                lines.append(cur.rstrip())
                cur = indent
            cur += part
    lines.append(cur.rstrip())
    return "\n".join(lines)


def row(pattern, max_urls, status, urls, msg):
    head = [c_str(pattern), str(max_urls), status, str(len(urls or []))]
    if urls:
        body = wrap([c_str(u) for u in urls], "     (const char *const[]){",
                    "                           ", "},")
        tail = "     NULL},"
        return wrap(head, "    {", "     ", ",") + "\n" + body + "\n" + tail
    return wrap(head + ["NULL", c_str(msg) if msg else "NULL"], "    {",
                "     ", "},")


def spec_result(spec):
    for name, value in SPEC_ENV:
        os.environ[name] = value
    for name in SPEC_UNSET:
        os.environ.pop(name, None)
    from webdataset.shardlists import expand_urls
    urls = []
    try:
        for part in spec.split("::"):
            if part:
                urls.extend(expand_urls(part))
    except (UnbalancedBracesError, AssertionError):
        return "WDS_ERR_SPEC", None
    return "WDS_OK", urls


def rows():
    out = ["static const brace_case brace_cases[] = {"]
    for pattern, max_urls, msg in CASES:
        status, urls = python_result(pattern, max_urls)
        if (status == "WDS_OK") != (msg is None):
            raise SystemExit("case %r: Python gives %s, table expects %r"
                             % (pattern, status, msg))
        out.append(row(pattern, max_urls, status, urls, msg))
    for pattern, max_urls, status, msg in REFUSED:
        status_py, _ = python_result(pattern, max_urls)
        assert status_py == "WDS_OK", pattern
        out.append(row(pattern, max_urls, status, None, msg))
    for pattern, max_urls, msg in HUGE:
        out.append(row(pattern, max_urls, "WDS_ERR_LIMIT", None, msg))
    out.append("};")
    out.append("")
    out.append("static const char *const spec_env[][2] = {")
    for name, value in SPEC_ENV:
        out.append(wrap([c_str(name), c_str(value)], "    {", "     ", "},"))
    out.append("};")
    out.append(wrap([c_str(n) for n in SPEC_UNSET],
                    "static const char *const spec_unset[] = {", "    ", "};"))
    out.append("")
    out.append("static const brace_case spec_cases[] = {")
    for spec, msg in SPEC_CASES:
        status, urls = spec_result(spec)
        if (status == "WDS_OK") != (msg is None):
            raise SystemExit("spec %r: Python gives %s, table expects %r"
                             % (spec, status, msg))
        out.append(row(spec, 0, status, urls, msg))
    out.append("};")
    return "\n".join(out) + "\n"


def main():
    text = rows()
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        path = sys.argv[2]
        src = open(path).read()
        a = src.index(BEGIN) + len(BEGIN)
        b = src.index(END)
        open(path, "w").write(src[:a] + text + src[b:])
        print("wrote %d brace cases and %d spec cases to %s"
              % (len(CASES) + len(REFUSED) + len(HUGE), len(SPEC_CASES),
                 path))
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
