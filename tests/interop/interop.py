"""Entry point of the interoperability test (run by interop.sh with the
virtual environment's Python): runs the check groups a-e and prints one
`ok NAME` / `FAIL NAME` line per check and a final `N passed, N failed`.

Usage: interop.py WDS_BINARY TMP_DIR"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import Context  # noqa: E402
import check_kill  # noqa: E402
import check_pywriters  # noqa: E402
import check_roundtrip  # noqa: E402
import check_verify  # noqa: E402
import check_write  # noqa: E402

GROUPS = [check_write, check_pywriters, check_roundtrip, check_kill, check_verify]


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    ctx = Context(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
    os.chdir(ctx.tmp)
    only = os.environ.get("WDS_INTEROP_ONLY")  # e.g. "verify,kill" while debugging
    for group in GROUPS:
        name = group.__name__.removeprefix("check_")
        if only and name not in only.split(","):
            continue
        group.run(ctx)
    print(f"{ctx.passed} passed, {ctx.failed} failed")
    return 1 if ctx.failed else 0


if __name__ == "__main__":
    sys.exit(main())
