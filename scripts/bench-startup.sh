#!/usr/bin/env bash
# Start-up benchmark (docs/performance.md, "Start-up"). Usage:
#   [BEFORE=OTHER_BUILD_DIR] [RUNS=50] scripts/bench-startup.sh [BUILD_DIR] [DATA_DIR]
# For each build (BEFORE's first, when given):
#   1. deterministic counts: the shared objects `wds --version` loads (the
#      dynamic loader's LD_DEBUG=files log), its symbol relocations
#      (LD_DEBUG=statistics), its instructions (valgrind --tool=callgrind,
#      whole process) and page faults (perf stat, when perf may count); the
#      median of 21 runs of the cycles the dynamic loader reports;
#   2. wall time, start to exit, of `wds --version` and of one epoch of
#      `wds bench DATA/1k-00.tar --decode bin --batch-size 256 --workers 1
#      --epochs 1` (50,000 samples of 1 KB; `cat` of the same file beside it),
#      RUNS rounds, the builds alternated within each round (the order
#      swapped every round) so that both see the same machine; medians and
#      quartiles in ms.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$root/build}
DATA=${2:-/tmp/wds-bench-data}
RUNS=${RUNS:-50}
PY=${PYTHON3:-/usr/bin/python3}
die() { echo "bench-startup.sh: $*" >&2; exit 1; }
source "$root/scripts/lib-bench.sh"
bench_check_devnull bench-startup.sh
names=() bins=()
if [ -n "${BEFORE:-}" ]; then
  [ -x "$BEFORE/tools/wds" ] || die "no $BEFORE/tools/wds"
  names+=(before) bins+=("$BEFORE/tools/wds")
fi
[ -x "$BUILD/tools/wds" ] || die "build first: $BUILD/tools/wds"
names+=(after) bins+=("$BUILD/tools/wds")
bench_synth_sets "${bins[-1]}" "$DATA"
FILE=$DATA/1k-00.tar
cat "$FILE" >/dev/null

echo "# deterministic counts, wds --version"
printf '%-7s %8s %12s %14s %12s %16s\n' build objects relocations instructions page-faults "loader cycles"
for i in "${!bins[@]}"; do
  w=${bins[$i]}
  objs=$(LD_DEBUG=files "$w" --version 2>&1 >/dev/null | grep -c 'generating link map' || true)
  relocs=$(LD_DEBUG=statistics "$w" --version 2>&1 >/dev/null |
    awk '/number of relocations:/ {print $NF; exit}')
  ir=-
  if command -v valgrind >/dev/null 2>&1; then
    ir=$(valgrind --tool=callgrind --callgrind-out-file=/dev/null "$w" --version 2>&1 >/dev/null |
      awk '/Collected :/ {print $NF}')
  fi
  pf=-
  if command -v perf >/dev/null 2>&1 &&
    out=$(perf stat -x, -e page-faults "$w" --version 2>&1 >/dev/null); then
    pf=$(echo "$out" | awk -F, '/page-faults/ {print $1}')
  fi
  cyc=$(for _ in $(seq 21); do
    LD_DEBUG=statistics "$w" --version 2>&1 >/dev/null |
      awk '/total startup time in dynamic loader:/ {print $(NF-1); exit}'
  done | bench_median)
  printf '%-7s %8s %12s %14s %12s %16s\n' "${names[$i]}" "$objs" "$relocs" "$ir" "$pf" "$cyc"
done

echo "# wall time (ms), $RUNS alternated rounds: median [quartiles]"
"$PY" - "$RUNS" "$FILE" "${names[@]}" -- "${bins[@]}" <<'PY'
import subprocess, sys, time
runs, path = int(sys.argv[1]), sys.argv[2]
rest = sys.argv[3:]
cut = rest.index("--")
names, bins = rest[:cut], rest[cut + 1:]
cmds = {"--version": ["--version"],
        "bench 1k-00": ["bench", path, "--decode", "bin", "--batch-size", "256",
                        "--workers", "1", "--epochs", "1"]}

def wall(argv):
    t = time.perf_counter_ns()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return (time.perf_counter_ns() - t) / 1e6

def q(xs, f):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(f * (len(xs) - 1) + 0.5))]

for label, args in cmds.items():
    times = {n: [] for n in names}
    cat = []
    for r in range(runs):
        order = list(zip(names, bins))
        if r % 2:
            order.reverse()
        for n, b in order:
            times[n].append(wall([b] + args))
        if label != "--version":
            cat.append(wall(["cat", path]))
    line = [label]
    for n in names:
        t = times[n]
        line.append("%s %.2f [%.2f-%.2f]" % (n, q(t, .5), q(t, .25), q(t, .75)))
    if cat:
        line.append("cat %.2f" % q(cat, .5))
    if len(names) == 2:
        ratios = [a / b for a, b in zip(times[names[1]], times[names[0]])]
        line.append("%s/%s per round: median %.3f" % (names[1], names[0], q(ratios, .5)))
    print("  ".join(line))
PY
