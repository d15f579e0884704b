"""The console scripts `wds` and `wds-train` of the installed package.

pip installs the two commands (built by CMake with the extension) in the
package, as wds/bin/wds and wds/bin/wds-train, and these entry points
(pyproject.toml [project.scripts]) replace the Python process with them:
the command then runs as if started directly (its exit status, signals and
output are its own).
"""

import os
import sys


def _exec(name):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    if not os.access(path, os.X_OK):
        sys.stderr.write(
            f"{name}: this wds package has no {path} (a wheel built with "
            "WDS_BUILD_TOOLS=OFF, or the package imported from a build "
            "tree: run BUILD/tools/wds and BUILD/trainer/wds-train there)\n")
        sys.exit(127)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [name] + sys.argv[1:])


def wds():
    _exec("wds")


def wds_train():
    _exec("wds-train")
