#!/usr/bin/env bash
# Tool test: the GPU checks' scripts on a machine without a GPU:
#   * gpu-run.sh compiles the Python extension from the files
#     python/CMakeLists.txt lists (python/wds/_*.c);
#   * scripts/gpu-run.sh --dry-run lists every step with its time limit,
#     each skipped, in one table, exit 0; --only selects steps; an unknown
#     option is a usage error;
#   * gpu-run.sh without the folder scripts/gpu-prepare.sh makes: its
#     set-up fails saying to run gpu-prepare.sh, the GPU steps are skipped
#     (no GPU) or not run, exit 1;
#   * python/bench/train_resnet.py compiles; its options are checked
#     (unknown feeder or model, --steps 0: exit 2 naming them); its table is
#     aligned, one row per run, in plan order; without a usable GPU every
#     run is skipped with its reason and it exits 77.
# Usage: gpu_scripts.sh SRC_DIR PYTHON3
set -uo pipefail
SRC=$1 PY=$2
passed=0
failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1${2:+: $2}"; failed=$((failed + 1)); }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/wds-gpu-scripts.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

if bash -n "$SRC/scripts/gpu-run.sh" && bash -n "$SRC/scripts/gpu-prepare.sh"; then
  ok "gpu-run.sh and gpu-prepare.sh parse"
else
  bad "bash -n"
fi

# The extension gpu-run.sh compiles by hand is the one CMake builds: it
# compiles python/wds/_*.c, and those are the files python/CMakeLists.txt
# lists.
listed=$(sed -n '/^set(WDS_PY_SOURCES/,/)/p' "$SRC/python/CMakeLists.txt" |
  tr ' ()' '\n\n\n' | grep '\.c$' | sort | paste -sd' ')
globbed=$(cd "$SRC/python" && ls wds/_*.c | sort | paste -sd' ')
if grep -q '"$root"/python/wds/_\*\.c' "$SRC/scripts/gpu-run.sh" && [ -n "$listed" ] &&
  [ "$listed" = "$globbed" ]; then
  ok "gpu-run.sh compiles the extension's files CMake lists ($listed)"
else
  bad "the extension's files" "CMake lists: $listed; python/wds/_*.c: $globbed; gpu-run.sh: $(grep -n 'python/wds/.*\.c' "$SRC/scripts/gpu-run.sh")"
fi

rc=0
"$SRC/scripts/gpu-run.sh" --dry-run >dry.out 2>&1 || rc=$?
steps="setup ctest train-gpu memcheck-loader memcheck-trainer racecheck-loader racecheck-trainer pytest-gpu train-ddp bench-data bench-feed bench-train bench-device bench-jpeg"
missing=
for s in $steps; do
  grep -q "^$s  *SKIP  *0  dry run, at most [0-9]* s: ." dry.out || missing="$missing $s"
done
if ((rc == 0)) && [ -z "$missing" ] && (($(grep -c '^step  *result' dry.out) == 1)) &&
  (($(grep -c 'SKIP' dry.out) == 14)); then
  ok "--dry-run: 14 steps with their limits, one table, exit 0"
else
  bad "--dry-run" "rc $rc, missing:$missing; $(cat dry.out)"
fi

rc=0
"$SRC/scripts/gpu-run.sh" --dry-run --only bench-feed,ctest >only.out 2>&1 || rc=$?
if ((rc == 0)) && grep -q '^ctest  *SKIP  *0  dry run' only.out && grep -q '^bench-feed  *SKIP  *0  dry run' only.out &&
  grep -q '^setup  *SKIP  *0  dry run' only.out && (($(grep -c 'not selected (--only)' only.out) == 11)); then
  ok "--only bench-feed,ctest: those two and the set-up, the others not selected"
else
  bad "--only" "rc $rc: $(cat only.out)"
fi
rc=0
"$SRC/scripts/gpu-run.sh" --bogus >bogus.out 2>&1 || rc=$?
if ((rc == 2)) && grep -q '^usage: gpu-run.sh' bogus.out; then ok "an unknown option: usage, exit 2"; else bad "--bogus" "rc $rc: $(cat bogus.out)"; fi

if ((gpus == 0)); then
  rc=0
  OUT=$TMP/out "$SRC/scripts/gpu-run.sh" "$TMP/no-carry" >nocarry.out 2>&1 || rc=$?
  if ((rc == 1)) && grep -q '^setup  *FAIL.*run scripts/gpu-prepare.sh first' nocarry.out &&
    grep -q '^ctest  *SKIP.*no GPU' nocarry.out && grep -q '^bench-train  *SKIP.*no GPU' nocarry.out &&
    [ -f "$TMP/out/gpu-run/table.txt" ]; then
    ok "no carried folder: set-up says to run gpu-prepare.sh, GPU steps skipped, logs under \$OUT"
  else
    bad "no carried folder" "rc $rc: $(cat nocarry.out)"
  fi
fi

TR=$SRC/python/bench/train_resnet.py
# No bytecode written into the source tree.
export PYTHONDONTWRITEBYTECODE=1
if "$PY" -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
  "$TR" "$TMP/tr.pyc" 2>err.txt; then
  ok "train_resnet.py compiles"
else
  bad "py_compile" "$(cat err.txt)"
fi
for args in "--feeders dali" "--models resnet9" "--steps 0" "--feeders ,"; do
  rc=0
  # shellcheck disable=SC2086  # split on purpose
  "$PY" "$TR" x.tar $args >/dev/null 2>err.txt || rc=$?
  opt=${args%% *}
  if ((rc == 2)) && grep -q -- "$opt" err.txt; then
    ok "train_resnet.py $args: exit 2 naming $opt"
  else
    bad "train_resnet.py $args" "rc $rc: $(cat err.txt)"
  fi
done
if "$PY" - "$SRC/python/bench" <<'PY' >unit.out 2>&1; then
import sys
sys.path.insert(0, sys.argv[1])
import train_resnet as t
a = t.parse_args(["a.tar", "b.tar", "--models", "resnet50,none", "--feeders", "torch-wds,wds",
                  "--steps", "7", "--workers", "3"])
assert a.shards == ["a.tar", "b.tar"] and a.steps == 7 and a.workers == 3
assert t.plan(a) == [("resnet50", "torch-wds"), ("resnet50", "wds"),
                     ("none", "torch-wds"), ("none", "wds")], t.plan(a)
rows = [t.row("resnet50", "wds", 2874.4, 1.23, 44.5, 50),
        t.row("resnet50", "torch-wds", 1210.0, 57.9, 105.8, 48, "budget 30 s reached"),
        t.row("none", "wds", note="skipped: no torch")]
lines = t.format_table(rows)
print("\n".join(lines))
assert len(lines) == 2 + len(rows)
assert lines[0].split() == ["model", "feeder", "images/s", "data-wait", "step", "ms", "steps", "note"]
assert set(lines[1]) <= {"-", " "}
# the numbers right-aligned in their columns, the notes left-aligned
col = lines[0].index("images/s") + len("images/s")
assert lines[2][:col].endswith("2,874") and lines[3][:col].endswith("1,210"), lines
assert lines[2][:lines[0].index("step ms") + 7].endswith("44.5")
assert "1.2%" in lines[2] and "57.9%" in lines[3] and lines[4].rstrip().endswith("skipped: no torch")
assert lines[3].rstrip().endswith("budget 30 s reached")
assert lines[0].index("note") == lines[3].index("budget")
print("unit ok")
PY
  ok "train_resnet.py: options, plan order, the table"
else
  bad "train_resnet.py unit" "$(cat unit.out)"
fi
if ((gpus == 0)); then
  rc=0
  "$PY" "$TR" x.tar --models none,resnet18 >skip.out 2>&1 || rc=$?
  if ((rc == 77)) && (($(grep -c '"note": "skipped: ' skip.out) == 4)) &&
    (($(grep -c '  skipped: no ' skip.out) == 4)); then
    ok "train_resnet.py without a GPU: 4 runs skipped with their reason, exit 77 ($(grep -m1 -o 'skipped: [^"]*' skip.out))"
  else
    bad "train_resnet.py without a GPU" "rc $rc: $(cat skip.out)"
  fi
fi

echo "$passed passed, $failed failed"
((failed == 0))
