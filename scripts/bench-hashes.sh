#!/usr/bin/env bash
# bench-hashes.sh — what checking each member against an index made with
# `wds index --hashes` costs (issue 34; docs/performance.md, "Index
# hashes"): the loader (`wds bench --decode`, exact mode, one worker, 3
# epochs) on 100 MB of plain tar (2,000 samples of 50 KB and a class, 4
# shards), with an index without hashes and with one; and `wds index`
# itself with and without --hashes. CPU seconds (user + system, from
# /usr/bin/time) are the measure: on a shared machine wall time mostly
# measures the others.
#
# usage: scripts/bench-hashes.sh [BUILD_DIR] [RUNS]   (default build, 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
runs=${2:-5}
wds=$build/tools/wds
for t in python3 /usr/bin/time; do
  command -v "$t" >/dev/null || { echo "bench-hashes.sh: $t not found" >&2; exit 2; }
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/wds-bench-hashes-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir"
python3 - <<'PY'
import io, random, tarfile
r = random.Random(1)
base = [bytes(r.getrandbits(8) for _ in range(50000)) for _ in range(50)]
with tarfile.open("src.tar", "w", format=tarfile.USTAR_FORMAT) as t:
    for i in range(2000):
        for ext, d in (("bin", base[i % 50]), ("cls", str(i % 10).encode())):
            ti = tarfile.TarInfo(f"s{i:05d}.{ext}")
            ti.size = len(d)
            t.addfile(ti, io.BytesIO(d))
PY
"$wds" write -o 's-%03d.tar' --maxsize 30M src.tar >/dev/null
spec='s-{000..003}.tar'
"$wds" index -o plain.json "$spec"
"$wds" index --hashes -o hashed.json "$spec"
ls -l plain.json hashed.json | awk '{printf "%s %d bytes\n", $NF, $5}'
for ((i = 0; i < runs; i++)); do
  for ix in plain hashed; do
    /usr/bin/time -f "loader $ix %U %S" "$wds" bench --decode bin:bytes,cls --workers 1 \
      --batch-size 32 --epochs 3 --mode exact --index $ix.json "$spec" 2>&1 >/dev/null | tail -1
  done
  /usr/bin/time -f "index plain %U %S" "$wds" index -o /dev/null "$spec" 2>&1 | tail -1
  /usr/bin/time -f "index hashed %U %S" "$wds" index --hashes -o /dev/null "$spec" 2>&1 | tail -1
done | sort | awk '{k = $1 " " $2; v = $3 + $4; a[k] = a[k] " " v; t[k] += v; n[k]++}
  END {for (k in t) printf "%-16s CPU mean %.3f s:%s\n", k, t[k] / n[k], a[k]}' | sort
