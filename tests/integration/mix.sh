#!/usr/bin/env bash
# Tool test: `wds batches --source` (and `wds bench --source`): a mix of two
# shard sets.
#
# Source 0: 3 shards x 8 samples (24), source 1: 2 shards x 5 (10), both
# made with `wds synth` (keys sample000000000.., the same in both sets: the
# S: prefix of each listed key tells the sources apart). Checks:
#   * exact mode, source 1 with repeat=2, over 2 ranks: equal line counts,
#     24 rows of source 0 (each key once) and 20 of source 1 (each key
#     twice); the same with :index=FILE per source as with counting;
#   * exact mode, source 1 with repeat=0.5: 5 of its keys per epoch, other
#     ones in the next epoch, all 10 over two;
#   * resampled mode, weights 1 and 3: source 1's share of 4000 rows within
#     3 standard deviations of 3/4; the first batch holds both sources;
#   * --resume-at K prints the lines after the first K of a full run;
#   * --json has "sources", --save's __rows__.json has "sources";
#   * one --source equals the SPEC alone, batch for batch (keys);
#   * errors: a bad :weight=, SPEC with --source, --index with --source
#     (exit 2, naming it); two sources in plain mode, weight in exact mode
#     (exit 1, saying why);
#   * --help lists --source; `wds bench --source` counts the batches.
#
# Usage: mix.sh WDS_BINARY [SHARED_TESTDATA]   (the second is unused)
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup mix "timeout cmp" "$@"

RC=0
run() {
  local out=$1
  shift
  RC=0
  timeout 120 "$WDS" batches "$@" >"$out.txt" 2>"$out.err" || RC=$?
}
run_ok() {
  local name=$1
  shift
  run "$@"
  if ((RC != 0)); then
    bad "$name" "exit status $RC: wds batches ${*:2}" "stderr: $(head -c 600 "$1.err")"
    return 1
  fi
}
py_check() {
  local name=$1 script=$2 msg
  shift 2
  if msg=$("$PYTHON3" -c "$script" "$@" 2>&1); then ok "$name"; else bad "$name" "$msg"; fi
}

"$WDS" synth --shards 3 --samples 8 --size 32 --seed 3 'a-%02d.tar' >/dev/null || die "wds synth a"
"$WDS" synth --shards 2 --samples 5 --size 32 --seed 4 'b-%02d.tar' >/dev/null || die "wds synth b"
A='a-{00..02}.tar'
B='b-{00..01}.tar'
"$WDS" index -o a.json "$A" >/dev/null 2>&1 || die "wds index a"
"$WDS" index -o b.json "$B" >/dev/null 2>&1 || die "wds index b"

# counts FILE...: "S:KEY count" per distinct row of text listings.
COUNTS='
import sys, collections
c = collections.Counter(k for f in sys.argv[2:] for l in open(f) for k in l.split()[2:])
exec(sys.argv[1])
'
# cnt_check NAME SCRIPT FILES...: SCRIPT runs with c (COUNTS over FILES) and
# sys.argv[2] the first file.
cnt_check() {
  local name=$1 script=$2
  shift 2
  py_check "$name" "$COUNTS" "$script" "$@"
}
# ------------------------------------------------------------ exact, repeat
files=()
for r in 0 1; do
  run_ok exact_repeat "rep.r$r" --source "$A" --source "$B:repeat=2" --decode cls \
    --mode exact --world 2 --rank "$r" --batch-size 4 --seed 7 --shuffle-buffer 5 || break
  files+=("rep.r$r.txt")
done
if ((${#files[@]} == 2)); then
  check exact_repeat_equal_lines test "$(wc -l <rep.r0.txt)" -eq "$(wc -l <rep.r1.txt)"
  cnt_check exact_repeat_counts '
a = {k: v for k, v in c.items() if k.startswith("0:")}
b = {k: v for k, v in c.items() if k.startswith("1:")}
assert len(a) == 24 and set(a.values()) == {1}, a
assert len(b) == 10 and set(b.values()) == {2}, b
assert set(k.split(":")[0] for k in c) == {"0", "1"}, c
' "${files[@]}"
  for r in 0 1; do
    run_ok exact_index "ix.r$r" --source "$A:index=a.json" --source "$B:repeat=2:index=b.json" \
      --decode cls --mode exact --world 2 --rank "$r" --batch-size 4 --seed 7 \
      --shuffle-buffer 5 &&
      check "exact_index_equals_counting_r$r" cmp -s "ix.r$r.txt" "rep.r$r.txt"
  done
fi

# ------------------------------------------------------------- exact, half
if run_ok exact_half half --source "$A" --source "$B:repeat=0.5" --decode cls --mode exact \
  --batch-size 4 --seed 1 --epochs 2; then
  cnt_check exact_half_windows '
import collections
seen = [collections.Counter(), collections.Counter()]
for l in open(sys.argv[2]):
    e = int(l.split()[0])
    seen[e].update(k for k in l.split()[2:] if k.startswith("1:"))
assert all(len(s) == 5 and set(s.values()) == {1} for s in seen), seen
assert not (set(seen[0]) & set(seen[1])), seen
' half.txt
fi

# ------------------------------------------------------------- resampled
if run_ok resampled res --source "$A:weight=1" --source "$B:weight=3" --decode cls \
  --mode resampled --samples-per-epoch 4000 --batch-size 16 --seed 2 --workers 3; then
  cnt_check resampled_share '
import math
n1 = sum(v for k, v in c.items() if k.startswith("1:"))
n = sum(c.values())
assert n == 4000, n
sd = math.sqrt(n * 0.75 * 0.25)
assert abs(n1 - 0.75 * n) <= 3 * sd, (n1, n, sd)
first = open(sys.argv[2]).readline().split()[2:]
assert {k.split(":")[0] for k in first} == {"0", "1"}, first
' res.txt
fi

# ------------------------------------------------------------- resume
if run_ok resume_full full --source "$A" --source "$B:proportion=0.5" --decode cls \
  --mode exact --batch-size 3 --seed 9 --shuffle-buffer 4 --epochs 2; then
  for k in 1 4; do
    run_ok "resume_$k" "resume$k" --source "$A" --source "$B:proportion=0.5" --decode cls \
      --mode exact --batch-size 3 --seed 9 --shuffle-buffer 4 --epochs 2 --resume-at "$k" &&
      check "resume_at_$k" cmp -s "resume$k.txt" <(tail -n +$((k + 1)) full.txt)
  done
fi

# ------------------------------------------------------------- outputs
if run_ok json json --source "$A" --source "$B" --decode cls --mode exact --batch-size 4 \
  --json --save saved; then
  cnt_check json_and_save_sources '
import json, glob
rows = [json.loads(l) for l in open(sys.argv[2])]
assert all(len(r["sources"]) == len(r["keys"]) for r in rows), rows[0]
assert sum(r["sources"].count(1) for r in rows) == 10, rows
saved = [json.load(open(f)) for f in sorted(glob.glob("saved/*.__rows__.json"))]
assert len(saved) == len(rows)
assert [s["sources"] for s in saved] == [r["sources"] for r in rows]
assert all(u.startswith("b-") == (s == 1) for d in saved
           for u, s in zip(d["urls"], d["sources"])), saved
' json.txt
fi
if run_ok one_source one --source "$A" --decode cls --mode exact --batch-size 4 --seed 3 \
  --shuffle-buffer 5 && run_ok one_spec spec "$A" --decode cls --mode exact --batch-size 4 \
  --seed 3 --shuffle-buffer 5; then
  check one_source_equals_spec cmp -s <(sed 's/ 0:/ /g' one.txt) spec.txt
fi

# ------------------------------------------------------------- errors
run bad_weight --source "$A:weight=x" --decode cls
check bad_weight_exit2 test "$RC" -eq 2
check bad_weight_named grep -q 'weight= needs a number' bad_weight.err
run both "$A" --source "$B" --decode cls
check spec_and_source_exit2 test "$RC" -eq 2
check spec_and_source_said grep -q 'not both' both.err
run index_too --source "$A" --index a.json --decode cls --mode exact
check index_with_source_exit2 test "$RC" -eq 2
check index_with_source_said grep -q ':index=FILE' index_too.err
run plain2 --source "$A" --source "$B" --decode cls
check plain_two_sources_exit1 test "$RC" -eq 1
check plain_two_sources_said grep -q 'plain mode' plain2.err
run exact_weight --source "$A" --source "$B:weight=2" --decode cls --mode exact
check exact_weight_exit1 test "$RC" -eq 1
check exact_weight_said grep -q 'weight is for resampled mode' exact_weight.err
check help_lists_source bash -c "'$WDS' batches --help | grep -q -- '--source SPEC'"

RC=0
timeout 120 "$WDS" bench --json --source "$A" --source "$B:repeat=2" --decode cls --mode exact \
  --batch-size 4 >bench.json 2>bench.err || RC=$?
if ((RC == 0)); then
  cnt_check bench_source '
import json
b = json.load(open(sys.argv[2]))
assert b["batches"] == 11 and b["samples"] == 44, b
' bench.json
else
  bad bench_source "exit status $RC: $(head -c 300 bench.err)"
fi

echo "$passed passed, $failed failed"
((failed == 0))
