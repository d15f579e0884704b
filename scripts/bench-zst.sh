#!/usr/bin/env bash
# bench-zst.sh — the .tar.zst figures (docs/performance.md, "Compressed
# shards (.tar.zst, .tar.gz)"): `wds bench` on the .tar.zst copies against `zstd -dc`
# of the same files, NOT pinned (both may use the second core: zstd's I/O
# threads, wds's reading thread), and the loader on the same files; with
# BEFORE, the same commands of another build in the same run, alternating.
#
# usage: scripts/bench-zst.sh [BUILD_DIR] [DATA_DIR]
#   BUILD_DIR  build holding tools/wds (default: build)
#   DATA_DIR   the sets of scripts/bench-read.sh (default:
#              ${TMPDIR:-/tmp}/wds-bench-data; run bench-read.sh once to
#              make them)
# environment: RUNS (timed runs per command, default 9), BEFORE (another
#              build directory: its tools/wds is timed too), LOADER=0 (skip
#              the loader lines), SETS (default "100k 1k")
# Prints per command the median and fastest wall time, the median CPU time
# (user + system, from wait4), and the ratio zstd -dc time / wds time (for
# the loader lines: the first line's time / this one's). "no read thread"
# is the same build with WDS_READ_THREAD=0 (shards/stream.c's reading
# thread off); the default is on when the process has a spare CPU. Then,
# where perf may count, `perf stat` means over RUNS runs of the stream's
# task-clock, context switches and page faults with WDS_READ_THREAD=1 and 0.
set -euo pipefail

BUILD_DIR=${1:-build}
DATA_DIR=${2:-${TMPDIR:-/tmp}/wds-bench-data}
RUNS=${RUNS:-9}
BEFORE=${BEFORE:-}
LOADER=${LOADER:-1}
SETS=${SETS:-"100k 1k"}
die() { echo "bench-zst.sh: $*" >&2; exit 1; }
source "$(dirname "$0")/lib-bench.sh"
bench_check_devnull bench-zst.sh
[ -x "$BUILD_DIR/tools/wds" ] || die "no wds binary at $BUILD_DIR/tools/wds"
[ -z "$BEFORE" ] || [ -x "$BEFORE/tools/wds" ] || die "no wds binary at $BEFORE/tools/wds"
command -v zstd >/dev/null || die "zstd is required"
for s in $SETS; do
  ls "$DATA_DIR/$s"-*.tar.zst >/dev/null 2>&1 ||
    die "no $DATA_DIR/$s-*.tar.zst: run scripts/bench-read.sh $BUILD_DIR $DATA_DIR once"
done
for _ in 1 2; do cat "$DATA_DIR"/*.tar.zst >/dev/null; done

python3 - "$BUILD_DIR/tools/wds" "${BEFORE:+$BEFORE/tools/wds}" "$DATA_DIR" "$RUNS" \
  "$LOADER" $SETS <<'EOF'
import os, statistics, subprocess, sys, time

wds, before, data, runs, loader = sys.argv[1:6]
runs, sets = int(runs), sys.argv[6:]
print("CPUs: %d (affinity %d), load average before: %.2f %.2f %.2f"
      % ((os.cpu_count(), len(os.sched_getaffinity(0))) + os.getloadavg()))
print("not pinned; %d timed runs per command after one warm-up, alternating"
      % runs)

def timed(cmd):
    with open(os.devnull, "wb") as null:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=null)
        _, st, ru = os.wait4(p.pid, 0)
        t = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(st) != 0:
        sys.exit("failed: " + " ".join(cmd))
    return t, ru.ru_utime + ru.ru_stime

def series(named):
    tw = {n: [] for n, _ in named}
    tc = {n: [] for n, _ in named}
    for i in range(runs + 1):
        for n, cmd in named:
            t, c = timed(cmd)
            if i:
                tw[n].append(t)
                tc[n].append(c)
    return tw, tc

def show(label, named, tw, tc, ref):
    for n, _ in named:
        r = statistics.median(tw[ref]) / statistics.median(tw[n])
        print("%-24s %-16s wall %.3f s (fastest %.3f)  cpu %.3f s  %s %.2f"
              % (label, n, statistics.median(tw[n]), min(tw[n]),
                 statistics.median(tc[n]),
                 "zstd -dc / this" if ref == "zstd -dc" else ref + " / this", r))

for s in sets:
    files = sorted(os.path.join(data, f) for f in os.listdir(data)
                   if f.startswith(s + "-") and f.endswith(".tar.zst"))
    named = [("zstd -dc", ["zstd", "-q", "-dc"] + files),
             ("wds bench", [wds, "bench"] + files),
             ("no read thread", ["env", "WDS_READ_THREAD=0", wds, "bench"] + files)]
    if before:
        named.append(("before", [before, "bench"] + files))
    tw, tc = series(named)
    show(s + " .tar.zst stream", named, tw, tc, "zstd -dc")
    if loader != "1":
        continue
    for workers in ("1", "2"):
        opts = ["--decode", "bin", "--batch-size", "256", "--shuffle-buffer",
                "10000", "--workers", workers, "--epochs", "1"]
        named = [("no read thread", ["env", "WDS_READ_THREAD=0", wds, "bench"]
                  + opts + files),
                 ("loader", [wds, "bench"] + opts + files)]
        if before:
            named.insert(0, ("before", [before, "bench"] + opts + files))
        tw, tc = series(named)
        show("%s loader, %s worker%s" % (s, workers, "s" if workers == "2" else ""),
             named, tw, tc, named[0][0])
print("load average after: %.2f %.2f %.2f" % os.getloadavg())
EOF

# perf stat: CPU time, context switches and page faults of the stream with
# and without the reading thread (means of RUNS runs).
if command -v perf >/dev/null && perf stat -e task-clock true >/dev/null 2>&1; then
  for s in $SETS; do
    for t in 1 0; do
      printf '%-5s WDS_READ_THREAD=%s  ' "$s" "$t"
      WDS_READ_THREAD=$t perf stat -r "$RUNS" -x, -e task-clock,context-switches,page-faults \
        "$BUILD_DIR/tools/wds" bench "$DATA_DIR/$s"-*.tar.zst 2>&1 >/dev/null |
        awk -F, '{printf "%s %s  ", $3, $1} END {print ""}'
    done
  done
fi
