#!/usr/bin/env bash
# bench-hold.sh — what holding a compressed shard's samples until their
# frame's check costs (issue 34; docs/performance.md, "Checked frames"):
# the loader (`wds bench --decode`, one worker, 3 epochs) on the same
# 100 MB of tar as .tar.zst two ways: as `wds write` writes it (frames of
# about 1 MiB) and recompressed by `zstd -3` as one frame per 30 MB shard,
# each with the default --max-unverified (held) and with --max-unverified 1
# (nothing held: the reader as it was before). CPU seconds (user + system,
# from /usr/bin/time) are the measure: on a shared machine wall time
# mostly measures the others.
#
# usage: scripts/bench-hold.sh [BUILD_DIR] [RUNS]   (default build, 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
runs=${2:-5}
wds=$build/tools/wds
for t in python3 zstd /usr/bin/time; do
  command -v "$t" >/dev/null || { echo "bench-hold.sh: $t not found" >&2; exit 2; }
done
dir=$(mktemp -d "${TMPDIR:-/tmp}/wds-bench-hold-XXXXXX")
trap 'rm -rf "$dir"' EXIT
cd "$dir"
# 2000 samples of 50 KB (4-bit random values: about 2:1 under zstd) and a
# class each: 100 MB of tar.
python3 - <<'PY'
import io, random, tarfile
r = random.Random(1)
base = [bytes(r.getrandbits(4) for _ in range(50000)) for _ in range(50)]
with tarfile.open("src.tar", "w", format=tarfile.USTAR_FORMAT) as t:
    for i in range(2000):
        for ext, d in (("bin", base[i % 50]), ("cls", str(i % 10).encode())):
            ti = tarfile.TarInfo(f"s{i:05d}.{ext}")
            ti.size = len(d)
            t.addfile(ti, io.BytesIO(d))
PY
"$wds" write -o 'mf-%03d.tar.zst' --maxsize 30M src.tar >/dev/null
for f in mf-*.tar.zst; do zstd -dcq "$f" | zstd -3 -q -o "one-${f#mf-}"; done
ls -l mf-*.tar.zst one-*.tar.zst | awk '{s[substr($NF,1,2)] += $5} END {
  printf "compressed: wds write (1 MiB frames) %d bytes, zstd -3 (one frame a shard) %d bytes\n", s["mf"], s["on"]}'
for ((i = 0; i < runs; i++)); do
  for set in mf one; do
    for hold in default 1; do
      args=()
      [[ $hold == 1 ]] && args=(--max-unverified 1)
      /usr/bin/time -f "$set $hold %U %S" "$wds" bench --decode bin:bytes,cls --workers 1 \
        --batch-size 32 --epochs 3 "${args[@]}" "$set-{000..003}.tar.zst" 2>&1 >/dev/null | tail -1
    done
  done
done | sort | awk '{k = $1 " " $2; v = $3 + $4; a[k] = a[k] " " v; t[k] += v; n[k]++}
  END {for (k in t) {split(k, p, " ");
         printf "%-28s --max-unverified %-8s CPU mean %.3f s:%s\n",
                p[1] == "mf" ? "wds write (1 MiB frames)" : "zstd -3 (one 30 MB frame)",
                p[2], t[k] / n[k], a[k]}}' | sort
