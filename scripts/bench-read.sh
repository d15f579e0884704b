#!/usr/bin/env bash
# bench-read.sh — the page-cache read benchmark of docs/performance.md.
#
# usage: scripts/bench-read.sh [BUILD_DIR] [DATA_DIR]
#   BUILD_DIR  CMake build directory holding tools/wds (default: build)
#   DATA_DIR   where the shard sets are generated (default:
#              ${TMPDIR:-/tmp}/wds-bench-data); kept between runs and only
#              regenerated when missing or made with other parameters
# environment: RUNS (timed runs per command, default 7), CPU (the core every
#              timed command is pinned to, default 0; "none": not pinned, so
#              that `zstd -dc`'s I/O threads and wds's reading thread may use
#              a second core: the .tar.zst target), PY_WDS (optional: a
#              python3 with the webdataset package; its plain iteration over
#              the .tar sets is then timed once each, for reference)
#
# Sets (written by `wds synth`, deterministic; sample = .bin + .cls + .json):
#   100k: 4 shards x 1,000 samples, .bin of 102400 bytes
#   1k:   2 shards x 50,000 samples, .bin of 1024 bytes
# and a .tar.zst copy of each (same content, zstd level 3, in the frames of
# about 1 MiB of tar that the writer makes, shards/tarw.c). With the page
# cache warm and every command pinned to one core, `wds bench SHARDS` is
# timed against `cat SHARDS > /dev/null` (plain) or
# `zstd -dc SHARDS > /dev/null` (.tar.zst), alternating, RUNS times each.
# Throughput is uncompressed tar bytes / wall time of the whole process; the
# ratio is wds / reference from the medians (and from the minimums).
set -euo pipefail

BUILD_DIR=${1:-build}
DATA_DIR=${2:-${TMPDIR:-/tmp}/wds-bench-data}
RUNS=${RUNS:-7}
CPU=${CPU:-0}
WDS=$BUILD_DIR/tools/wds

die() { echo "bench-read.sh: $*" >&2; exit 1; }
source "$(dirname "$0")/lib-bench.sh"
bench_check_devnull bench-read.sh
[ -x "$WDS" ] || die "no wds binary at $WDS (build first, or pass BUILD_DIR)"
tools="cat zstd python3"
[ "$CPU" = none ] || tools="$tools taskset"
for tool in $tools; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
mkdir -p "$DATA_DIR"

# name shards samples size seed
SETS=("100k 4 1000 102400 1" "1k 2 50000 1024 2")

generate() {
  local name=$1 shards=$2 samples=$3 size=$4 seed=$5
  local params
  params="$shards $samples $size $seed $("$WDS" --version)"
  local stamp="$DATA_DIR/$name.params"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$params" ]; then
    return
  fi
  echo "generating $name: $shards shards x $samples samples, .bin $size bytes"
  rm -f "$stamp" "$DATA_DIR/$name"-*.tar "$DATA_DIR/$name"-*.tar.zst
  "$WDS" synth --shards "$shards" --samples "$samples" --size "$size" \
    --seed "$seed" "$DATA_DIR/$name-%02d.tar"
  "$WDS" synth --shards "$shards" --samples "$samples" --size "$size" \
    --seed "$seed" --level 3 "$DATA_DIR/$name-%02d.tar.zst"
  # The .zst copy must be the same archive, byte for byte.
  for f in "$DATA_DIR/$name"-*.tar; do
    zstd -q -dc "$f.zst" | cmp -s - "$f" || die "$f.zst does not match $f"
  done
  echo "$params" >"$stamp"
}

for s in "${SETS[@]}"; do
  # shellcheck disable=SC2086
  generate $s
done

echo "warming the page cache"
for _ in 1 2; do cat "$DATA_DIR"/*.tar "$DATA_DIR"/*.tar.zst >/dev/null; done

PY_WDS=${PY_WDS:-} python3 - "$WDS" "$DATA_DIR" "$RUNS" "$CPU" "${SETS[@]}" <<'EOF'
import os, platform, re, statistics, subprocess, sys, tempfile, time

wds, data_dir, runs, cpu = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sets = [s.split() for s in sys.argv[5:]]
targets = {("100k", "tar"): 0.9, ("1k", "tar"): 0.5,
           ("100k", "zst"): 0.9, ("1k", "zst"): 0.9}
pin = [] if cpu == "none" else ["taskset", "-c", cpu]

def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"

out_file = tempfile.TemporaryFile()

def timed(cmd, keep_output=False):
    """Runs cmd pinned; returns (wall s, CPU s = user + sys, stdout text).
    Output goes to /dev/null (or a file to read back), never a pipe."""
    out_file.seek(0)
    out_file.truncate()
    with open(os.devnull, "wb") as null:
        t0 = time.perf_counter()
        p = subprocess.Popen(pin + cmd, stdout=out_file if keep_output else null,
                             stderr=None)
        _, status, ru = os.wait4(p.pid, 0)
        t = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit("failed (%d): %s" % (p.returncode, " ".join(cmd)))
    out_file.seek(0)
    return t, ru.ru_utime + ru.ru_stime, out_file.read().decode()

print("machine: %s, %d CPUs, kernel %s" % (cpu_model(), os.cpu_count(),
                                            platform.release()))
print("load average before: %.2f %.2f %.2f" % os.getloadavg())
print("%s, %d timed runs per command (after one warm-up), alternating"
      % ("not pinned" if cpu == "none" else "pinned to CPU " + cpu, runs))
print()
rows = []
for name, shards, samples, size, seed in sets:
    plain = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir)
                   if re.fullmatch(re.escape(name) + r"-\d+\.tar", f))
    zst = [f + ".zst" for f in plain]
    nbytes = sum(os.path.getsize(f) for f in plain)
    zbytes = sum(os.path.getsize(f) for f in zst)
    expect = int(shards) * int(samples)
    for kind, files, refname in (("tar", plain, "cat"), ("zst", zst, "zstd -dc")):
        ref_cmd = refname.split() + files
        wds_cmd = [wds, "bench"] + files
        timed(ref_cmd)
        out = timed(wds_cmd, keep_output=True)[2]
        m = re.search(r"samples (\d+)", out)
        if not m or int(m.group(1)) != expect:
            sys.exit("wds bench saw %s samples, expected %d: %s"
                     % (m and m.group(1), expect, out))
        tr, tw, cr, cw = [], [], [], []
        for _ in range(runs):
            t, c, _ = timed(ref_cmd)
            tr.append(t)
            cr.append(c)
            t, c, _ = timed(wds_cmd)
            tw.append(t)
            cw.append(c)
        rows.append(dict(set=name, kind=kind, ref=refname, bytes=nbytes,
                         file_bytes=zbytes if kind == "zst" else nbytes,
                         samples=expect, tr=tr, tw=tw, cr=cr, cw=cw,
                         target=targets[(name, kind)]))

def mbs(nbytes, t):
    return nbytes / t / 1e6

hdr = ("%-14s %-9s %9s %9s %9s %6s %6s %6s %6s  %s" %
       ("set", "reference", "ref MB/s", "wds MB/s", "samples/s", "ratio",
        "(min)", "(cpu)", "target", "result"))
print(hdr)
print("-" * len(hdr))
for r in rows:
    ref_med, wds_med = statistics.median(r["tr"]), statistics.median(r["tw"])
    ratio = ref_med / wds_med
    ratio_min = min(r["tr"]) / min(r["tw"])
    ratio_cpu = statistics.median(r["cr"]) / max(statistics.median(r["cw"]), 1e-9)
    label = "%s .tar%s" % (r["set"], ".zst" if r["kind"] == "zst" else "")
    print("%-14s %-9s %9.0f %9.0f %9.0f %6.2f %6.2f %6.2f %6.2f  %s" %
          (label, r["ref"], mbs(r["bytes"], ref_med), mbs(r["bytes"], wds_med),
           r["samples"] / wds_med, ratio, ratio_min, ratio_cpu, r["target"],
           "pass" if ratio >= r["target"] else "MISS"))
print()
print("MB/s: 10^6 bytes of uncompressed tar per second of wall time, median "
      "of %d runs." % runs)
print("ratio: reference wall time / wds wall time, medians; (min): from the "
      "fastest runs;")
print("(cpu): from the medians of user + system CPU time. pass/MISS is "
      "judged on the median ratio.")
for r in rows:
    print("%s %s: %d tar bytes (%d in files)" % (r["set"], r["kind"],
                                                  r["bytes"], r["file_bytes"]))
    for who, t, c in (("ref", r["tr"], r["cr"]), ("wds", r["tw"], r["cw"])):
        print("  %s wall s %s | cpu s %s" % (
            who, " ".join("%.3f" % x for x in sorted(t)),
            " ".join("%.3f" % x for x in sorted(c))))
py = os.environ.get("PY_WDS")
if py:
    loop = ("import sys, webdataset as wds\n"
            "n = sum(1 for _ in wds.WebDataset(sys.argv[1:], shardshuffle=False))\n"
            "print(n)")
    print()
    print("reference: Python WebDataset (%s), one run each, no decoding" % py)
    for r in rows:
        if r["kind"] != "tar":
            continue
        files = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir)
                       if re.fullmatch(re.escape(r["set"]) + r"-\d+\.tar", f))
        t, c, out = timed([py, "-c", loop] + files, keep_output=True)
        print("%-14s %9.0f MB/s  ratio to cat %.3f  (%s samples, %.2f s)" % (
            r["set"] + " .tar", mbs(r["bytes"], t),
            statistics.median(r["tr"]) / t, out.strip(), t))
print("load average after: %.2f %.2f %.2f" % os.getloadavg())
EOF
