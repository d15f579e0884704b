#!/usr/bin/env bash
# Tool test: `wds batches` (and `wds bench` with loader options).
#
# Shards are made at test time with `wds synth` (5 shards x 7 samples, keys
# sample000000000..034, fields .bin/.cls/.json) and, for images, with Python
# (PIL) into a tar. Checks, with the exact counts the loader's contract
# (include/wds/loader.h) gives:
#   * plain mode: ceil(35/B) lines per epoch, every key once, --epochs;
#   * exact mode over W ranks: the same line count on every rank; the keys
#     of all ranks are all 35 keys, with W*ceil(35/W) - 35 repeats (padding),
#     or W*floor(35/W) distinct keys with --drop-last; --last-batch pad
#     fills rows marked invalid; --index gives the same batches as the
#     counting pass, a stale index is an error;
#   * resampled mode: ceil(S/B) lines per rank, S rows;
#   * the output is the same in two runs and with other --prefetch values;
#     another --seed changes it;
#   * --resume-at K (with --epoch) prints exactly the lines after the first K
#     of an uninterrupted run; in plain mode a K past the epoch's end is an
#     error naming both;
#   * elastic resume (--resume-state) in exact mode, of one spec and of a
#     mix of two sources, on 3 ranks after 2, with and without indexes:
#     every sample of the epoch once (padding aside), equal line counts;
#   * --save writes .npy files numpy loads with the right shapes and values
#     (compared with the tar members), bytes fields with offsets; images
#     decoded and resized, NHWC uint8;
#   * keys with blanks and backslashes print as \xHH in the text output;
#   * bad flags exit 2 naming the flag, as do options the mode ignores
#     (naming the mode); a missing shard exits 1 naming it;
#   * `wds bench` with loader options reports the same batch count;
#   * --rank-batch-sizes: equal step counts, each rank's rows its size,
#     every key once plus padding below the sum (exact), resampled counts,
#     resume, usage errors, bench's JSON fields.
#
# Usage: batches.sh WDS_BINARY [SHARED_TESTDATA]   (the second is unused)
# Prints `ok NAME` / `FAIL NAME` per check and a final `N passed, N failed`.
# Set WDS_TEST_KEEP=1 to keep the temporary directory.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup batches "timeout cmp" "$@"
"$PYTHON3" -c 'import numpy' 2>/dev/null ||
  die "$PYTHON3 has no numpy (apt-get install python3-numpy)"
"$PYTHON3" -c 'import PIL' 2>/dev/null ||
  die "$PYTHON3 has no PIL (apt-get install python3-pil)"


# run OUT ARGS...: `wds batches ARGS` into OUT.txt / OUT.err, status in RC.
RC=0
run() {
  local out=$1
  shift
  RC=0
  timeout 120 "$WDS" batches "$@" >"$out.txt" 2>"$out.err" || RC=$?
}
# run_ok NAME OUT ARGS...: as run, and a failure (status != 0) is reported.
run_ok() {
  local name=$1
  shift
  run "$@"
  if ((RC != 0)); then
    bad "$name" "exit status $RC: wds batches ${*:2}" "stderr: $(head -c 600 "$1.err")"
    return 1
  fi
}
# py SCRIPT ARGS...: runs Python; its stdout is the check's message, and a
# non-zero exit fails the check.
py_check() {
  local name=$1 script=$2 msg
  shift 2
  if msg=$("$PYTHON3" -c "$script" "$@" 2>&1); then ok "$name"; else bad "$name" "$msg"; fi
}

# ---------------------------------------------------------------- fixtures
"$WDS" synth --shards 5 --samples 7 --size 32 --seed 3 'd-%02d.tar' >/dev/null ||
  die "wds synth failed"
SPEC='d-{00..04}.tar'
N=35
"$PYTHON3" - <<'EOF' || die "cannot make the image shard"
import io, tarfile
from PIL import Image
with tarfile.open("img.tar", "w", format=tarfile.GNU_FORMAT) as t:
    for k, (w, h) in enumerate([(40, 30), (32, 32), (17, 50), (64, 20), (33, 33)]):
        img = Image.new("RGB", (w, h), (10 * k, 100, 200))
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        for name, data in ((f"im{k:03d}.png", buf.getvalue()),
                           (f"im{k:03d}.cls", str(k).encode())):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            ti.mtime = 1700000000
            t.addfile(ti, io.BytesIO(data))
EOF

# Checks on a batches output (text): lines, keys, duplicates.
STATS='
import sys, collections
lines = [l.split() for l in open(sys.argv[1])]
keys = [k for l in lines for k in l[2:]]
print(len(lines), len(keys), len(set(keys)))
'
stats() { "$PYTHON3" -c "$STATS" "$1"; }
all_keys() { for ((k = 0; k < N; k++)); do printf 'sample%09d\n' "$k"; done; }
all_keys >all.keys
# keys_of FILES...: the sorted distinct keys of batches outputs.
keys_of() { cat "$@" | cut -d' ' -f3- | tr ' ' '\n' | sort -u; }

# ------------------------------------------------------------- plain mode
if run_ok plain plain "$SPEC" --decode cls --batch-size 4 --epochs 2; then
  read -r lines nkeys ndistinct < <(stats plain.txt)
  check plain_lines test "$lines" -eq 18 # 2 epochs x ceil(35/4)
  check plain_rows test "$nkeys" -eq 70
  check plain_each_key_once_per_epoch \
    cmp -s <(grep '^0 ' plain.txt | cut -d' ' -f3- | tr ' ' '\n' | sort) all.keys
  check plain_epochs_numbered test "$(cut -d' ' -f1 plain.txt | uniq -c | awk '{print $2":"$1}' | tr '\n' ' ')" = "0:9 1:9 "
  check plain_batch_index test "$(grep '^1 ' plain.txt | cut -d' ' -f2 | tr '\n' ' ')" = "0 1 2 3 4 5 6 7 8 "
  check plain_last_batch_size test "$(grep '^0 8 ' plain.txt | wc -w)" -eq $((2 + 3))
fi
if run_ok plain_drop plain_drop "$SPEC" --decode cls --batch-size 4 --last-batch drop; then
  check plain_drop_lines test "$(wc -l <plain_drop.txt)" -eq 8
fi
# --drop-last without --last-batch drops the partial last batch in every
# mode (the library's rule: last_batch's unset default); --last-batch given
# wins, before or after it.
if run_ok plain_drop_last plain_drop_last "$SPEC" --decode cls --batch-size 4 --drop-last; then
  check plain_drop_last_drops_the_last_batch test "$(wc -l <plain_drop_last.txt)" -eq 8
fi
if run_ok plain_drop_last_keep plain_drop_last_keep "$SPEC" --decode cls --batch-size 4 \
  --last-batch keep --drop-last; then
  check plain_drop_last_keep_given_wins test "$(wc -l <plain_drop_last_keep.txt)" -eq 9
fi

# ------------------------------------------------------------- exact mode
# exact_case NAME WORLD BATCH EXTRA...: checks one configuration over all ranks.
# Per rank: ceil(N/W) samples (padded), or floor(N/W) with --drop-last; then
# batches: keep (a smaller last one), drop (no partial one) or pad (filled).
exact_case() {
  local name=$1 world=$2 batch=$3 r
  shift 3
  local tail_drop=0 how=keep args=("$@") i
  for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
    --drop-last) tail_drop=1 && [[ $how == keep ]] && how=drop ;;
    --last-batch) how=${args[i + 1]} ;;
    esac
  done
  local per_rank lines_want rows_per_rank
  if ((tail_drop)); then per_rank=$((N / world)); else per_rank=$(((N + world - 1) / world)); fi
  case $how in
  keep) lines_want=$(((per_rank + batch - 1) / batch)) rows_per_rank=$per_rank ;;
  drop) lines_want=$((per_rank / batch)) rows_per_rank=$((lines_want * batch)) ;;
  pad) lines_want=$(((per_rank + batch - 1) / batch)) rows_per_rank=$((lines_want * batch)) ;;
  esac
  local files=() lines
  for ((r = 0; r < world; r++)); do
    run_ok "$name" "$name.r$r" "$SPEC" --decode cls --mode exact --batch-size "$batch" \
      --rank "$r" --world "$world" --seed 5 --shuffle-buffer 6 "$@" || return
    files+=("$name.r$r.txt")
    lines=$(wc -l <"$name.r$r.txt")
    if ((lines != lines_want)); then
      bad "$name" "rank $r: $lines lines, want $lines_want"
      return
    fi
  done
  local nkeys ndistinct
  cat "${files[@]}" >"$name.all"
  read -r _ nkeys ndistinct < <(stats "$name.all")
  if ((nkeys != rows_per_rank * world)); then
    bad "$name" "$nkeys rows over the ranks, want $((rows_per_rank * world))"
    return
  fi
  if [[ -n $(keys_of "${files[@]}" | comm -23 - all.keys) ]]; then
    bad "$name" "keys that are not in the shards"
    return
  fi
  if ((tail_drop)) && [[ $how != pad ]] && ((ndistinct != nkeys)); then
    bad "$name" "$((nkeys - ndistinct)) repeated keys, want none (tail dropped)"
    return
  fi
  if ((!tail_drop)) && [[ $how == keep ]]; then
    # All keys, and W * ceil(N/W) - N padding repeats.
    if ! cmp -s <(keys_of "${files[@]}") all.keys; then
      bad "$name" "the keys of all ranks are not the $N keys of the shards"
      return
    fi
    if ((nkeys - ndistinct != per_rank * world - N)); then
      bad "$name" "$((nkeys - ndistinct)) repeated keys, want $((per_rank * world - N)) (padding)"
      return
    fi
  fi
  ok "$name"
}
exact_case exact_w1 1 4
exact_case exact_w3 3 5
exact_case exact_w4 4 4
exact_case exact_w6 6 2
exact_case exact_w3_drop_last 3 4 --drop-last
exact_case exact_w4_drop_last 4 3 --drop-last
exact_case exact_w3_last_batch_drop 3 5 --last-batch drop --no-shard-shuffle
exact_case exact_w4_drop_last_pad 4 3 --drop-last --last-batch pad
exact_case exact_w2_pad 2 4 --last-batch pad

# --last-batch pad: full batches, the fill rows marked invalid.
if run_ok exact_pad pad "$SPEC" --decode cls --mode exact --batch-size 5 --world 3 --rank 1 \
  --last-batch pad --json; then
  py_check exact_pad_valid '
import json, sys
b = [json.loads(l) for l in open(sys.argv[1])]
assert len(b) == 3, f"{len(b)} batches, want 3"
assert all(len(x["keys"]) == 5 == len(x["valid"]) for x in b), b
v = [x["valid"] for x in b]
assert v[0] == v[1] == [1] * 5 and v[2] == [1, 1, 0, 0, 0], v
assert b[2]["keys"][2:] == b[2]["keys"][:3], b[2]["keys"]
' pad.txt
fi

# --index: the same batches as the counting pass; a stale index is an error.
"$PYTHON3" - <<'EOF' || die "cannot write the index"
import json, os
shards = [{"url": f"d-{i:02d}.tar", "nsamples": 7,
           "filesize": os.path.getsize(f"d-{i:02d}.tar")} for i in range(5)]
json.dump({"wids_version": 1, "shardlist": shards}, open("index.json", "w"))
shards[3]["filesize"] += 512
json.dump({"wids_version": 1, "shardlist": shards}, open("stale.json", "w"))
EOF
if run_ok index_count counted "$SPEC" --decode cls --mode exact --batch-size 4 --world 2 --rank 1 &&
  run_ok index_file indexed "$SPEC" --decode cls --mode exact --batch-size 4 --world 2 --rank 1 \
    --index index.json; then
  check index_same_batches cmp -s counted.txt indexed.txt
fi
run stale "$SPEC" --decode cls --mode exact --batch-size 4 --index stale.json
check stale_index_fails test "$RC" -eq 1
check stale_index_message grep -q 'stale index' stale.err
check stale_index_names_shard grep -q 'd-03.tar' stale.err

# --------------------------------------------------------- resampled mode
for world in 1 2; do
  for ((r = 0; r < world; r++)); do
    if run_ok "resampled_w${world}_r$r" res "$SPEC" --decode cls --mode resampled \
      --samples-per-epoch 17 --batch-size 4 --rank "$r" --world "$world" --epochs 2; then
      read -r lines nkeys _ < <(stats res.txt)
      check "resampled_w${world}_r${r}_lines" test "$lines" -eq 10 # 2 x ceil(17/4)
      check "resampled_w${world}_r${r}_rows" test "$nkeys" -eq 34
      check "resampled_w${world}_r${r}_known_keys" \
        test -z "$(keys_of res.txt | comm -23 - all.keys)"
    fi
  done
done

# ------------------------------------------------------------ determinism
EX=("$SPEC" --decode cls --mode exact --batch-size 3 --world 2 --rank 0 --seed 11
  --shuffle-buffer 8 --workers 3)
ARGS=("${EX[@]}" --epochs 3)
if run_ok det_a det_a "${ARGS[@]}" && run_ok det_b det_b "${ARGS[@]}"; then
  check same_output_twice cmp -s det_a.txt det_b.txt
  for p in 2 3 7; do
    run_ok "prefetch_$p" "det_p$p" "${ARGS[@]}" --prefetch "$p" &&
      check "same_output_prefetch_$p" cmp -s det_a.txt "det_p$p.txt"
  done
  # Reading the next epoch early (--eager-next-epoch) gives the same batches.
  run_ok eager_next_epoch det_eager "${ARGS[@]}" --eager-next-epoch &&
    check same_output_eager_next_epoch cmp -s det_a.txt det_eager.txt
  run_ok other_seed det_seed "${ARGS[@]}" --seed 12 &&
    check other_seed_other_order bash -c '! cmp -s det_a.txt det_seed.txt'
  # The epochs differ from each other (reshuffled per epoch).
  check epochs_reshuffled bash -c \
    '! cmp -s <(grep "^0 " det_a.txt | cut -d" " -f2-) <(grep "^1 " det_a.txt | cut -d" " -f2-)'
fi
RBASE=("$SPEC" --decode cls --mode resampled --samples-per-epoch 23 --batch-size 4 --seed 2
  --shuffle-buffer 5)
RARGS=("${RBASE[@]}" --epochs 2)
if run_ok det_res_a det_ra "${RARGS[@]}" && run_ok det_res_b det_rb "${RARGS[@]}" --prefetch 2; then
  check same_output_resampled cmp -s det_ra.txt det_rb.txt
  run_ok det_res_eager det_re "${RARGS[@]}" --eager-next-epoch &&
    check same_output_resampled_eager cmp -s det_ra.txt det_re.txt
fi

# ------------------------------------------------------------------ resume
# full.txt: 3 epochs uninterrupted; resuming at (epoch e, batch k) must print
# exactly the lines that follow.
resume_case() {
  local name=$1 full=$2 epoch=$3 k=$4 epochs=$5
  shift 5
  run_ok "$name" "$name" "$@" --epoch "$epoch" --resume-at "$k" --epochs "$epochs" || return
  local skip
  skip=$(awk -v e="$epoch" '$1 < e' "$full" | wc -l)
  skip=$((skip + k))
  if cmp -s <(tail -n +$((skip + 1)) "$full" | awk -v e="$epoch" -v n="$epochs" '$1 < e + n') "$name.txt"; then
    ok "$name"
  else
    bad "$name" "resumed output differs from the uninterrupted run after line $skip" \
      "$(diff <(tail -n +$((skip + 1)) "$full") "$name.txt" | head -5)"
  fi
}
if run_ok resume_full full "${ARGS[@]}"; then
  resume_case resume_e0_k0 full.txt 0 0 3 "${EX[@]}"
  resume_case resume_e0_k1 full.txt 0 1 3 "${EX[@]}"
  resume_case resume_e0_k4 full.txt 0 4 2 "${EX[@]}"
  resume_case resume_e1_k2 full.txt 1 2 2 "${EX[@]}"
  resume_case resume_e2_k5 full.txt 2 5 1 "${EX[@]}"
  # At the end of an epoch: nothing left of it, the next one follows.
  resume_case resume_e0_end full.txt 0 "$(grep -c '^0 ' full.txt)" 2 "${EX[@]}"
fi
# Plain mode knows an epoch's length only once read: a resume point past it
# is an error naming both (it printed nothing and exited 0).
for k in 1000000 18446744073709551615; do
  run plain_past "$SPEC" --decode cls --mode plain --resume-at "$k"
  if ((RC == 1)) && [[ ! -s plain_past.txt ]] &&
    grep -q "^wds batches: resume at batch $k of epoch 0, but the epoch has [0-9]* batches .*past its end" plain_past.err; then
    ok "plain mode, --resume-at $k past the end: $(cat plain_past.err)"
  else
    bad "plain mode, --resume-at $k past the end" "exit $RC: $(head -c 300 plain_past.err)"
  fi
done
# --max-batches K --save-state FILE, then --resume-state FILE: the saved
# state carries what gives the position meaning. Saved on rank 0, it resumes
# rank 1 of the same world where rank 1's uninterrupted run goes on; on
# another world (3, 1) or with another batch size it is an error naming
# both values (--resume-at alone resumed 2 -> 1 silently, missing and
# repeating samples). A state that is not one is an error saying so.
ST=("$SPEC" --decode cls --mode exact --batch-size 3 --world 2 --seed 11 --shuffle-buffer 4)
if run_ok state_save st_save "${ST[@]}" --rank 0 --max-batches 4 --save-state st.txt &&
  run_ok state_full1 st_full1 "${ST[@]}" --rank 1; then
  check state_save_stops_after_max_batches test "$(wc -l <st_save.txt)" = 4
  check state_file_is_versioned grep -qx 'wds-loader-state 1' st.txt
  run_ok state_resume_rank1 st_r1 "${ST[@]}" --rank 1 --resume-state st.txt &&
    check state_resumes_another_rank cmp -s <(tail -n +5 st_full1.txt) st_r1.txt
  # Exact mode, but the saved shuffle buffer's byte bound may have changed
  # its order (default --max-sample-bytes): not replayable, refused naming
  # the values, on another world or with another batch size.
  for w in 3 1; do
    run st_w$w "$SPEC" --decode cls --mode exact --batch-size 3 --world $w --rank 0 --seed 11 \
      --shuffle-buffer 4 --resume-state st.txt
    if ((RC == 1)) && [[ ! -s st_w$w.txt ]] &&
      grep -q "saved with a shuffle buffer of 4 samples and shuffle_buffer_bytes 1073741824, max_sample_bytes 1073741824: its byte bound may have changed" st_w$w.err; then
      ok "resume state on world $w: $(cat st_w$w.err)"
    else
      bad "resume state on world $w refused" "exit $RC: $(head -c 300 st_w$w.err)"
    fi
  done
  run st_bs "${ST[@]}" --rank 0 --batch-size 4 --resume-state st.txt
  if ((RC == 1)) && grep -q "its byte bound may have changed" st_bs.err; then
    ok "resume state with another batch size refused"
  else
    bad "resume state with another batch size refused" "exit $RC: $(head -c 300 st_bs.err)"
  fi
  # Resampled mode: the epoch's count left (2 x 10 samples, minus the 2
  # batches of 3 each old rank drew) is re-dealt to 3 ranks in equal steps;
  # another seed is refused naming both.
  RS=("$SPEC" --decode cls --mode resampled --samples-per-epoch 10 --batch-size 3)
  if run_ok state_res_save st_rs "${RS[@]}" --seed 11 --world 2 --rank 0 --max-batches 2 \
    --save-state st_rs.txt; then
    n=0
    for r in 0 1 2; do
      run_ok "resampled_elastic_$r" st_rs3_$r "${RS[@]}" --seed 11 --world 3 --rank $r \
        --resume-state st_rs.txt && n=$((n + $(wc -w <st_rs3_$r.txt) - 2 * $(wc -l <st_rs3_$r.txt)))
    done
    # 20 - 12 = 8 rows left: 3 ranks, ceil(8 / 3) = 3 rows each, one batch
    check "resampled elastic resume: 8 samples left drawn as 3 x 3 (got $n)" test "$n" = 9
    run st_rs_seed "${RS[@]}" --seed 12 --world 3 --rank 0 --resume-state st_rs.txt
    if ((RC == 1)) && grep -q "saved with seed 11; this loader has seed 12" st_rs_seed.err; then
      ok "resampled resume state with another seed: $(cat st_rs_seed.err)"
    else
      bad "resampled resume state with another seed refused" "exit $RC: $(head -c 300 st_rs_seed.err)"
    fi
  fi
  echo '{"epoch": 0, "batches": 4}' >foreign.txt
  run st_foreign "${ST[@]}" --rank 0 --resume-state foreign.txt
  if ((RC == 1)) && grep -q "not a wds loader state" st_foreign.err; then
    ok "a foreign resume state is refused"
  else
    bad "a foreign resume state is refused" "exit $RC: $(head -c 300 st_foreign.err)"
  fi
fi
# Elastic resume (exact mode): 2 ranks stopped after 3 batches each, the
# state of rank 1 resumed on 3 ranks with other batch sizes and workers,
# with and without an index (`wds index`: the remainder's pieces read by
# offset): the keys printed before the stop and after it are all 35 keys,
# repeats only as padding (fewer than 2 + 3); every new rank prints the
# same number of lines; the next epoch is a fresh 3-rank run's.
"$WDS" index "$SPEC" -o el.index.json >/dev/null 2>&1 || bad "wds index for the elastic resume" ""
EL=("$SPEC" --decode cls --mode exact --seed 5 --shuffle-buffer 4 --max-sample-bytes 65536)
for ix in "" --index=el.index.json; do
  tag=${ix:+_index}
  : >el_keys$tag.txt
  for r in 0 1; do
    run_ok "elastic_old$tag" el_old$r "${EL[@]}" $ix --world 2 --rank $r --batch-size 2 --workers 2 \
      --max-batches 3 --save-state el_state$r.txt && cut -d' ' -f3- el_old$r.txt | tr ' ' '\n' >>el_keys$tag.txt
  done
  lines=()
  for r in 0 1 2; do
    run_ok "elastic_new$tag" el_new$r "${EL[@]}" $ix --world 3 --rank $r --batch-size 3 --workers 3 \
      --epochs 2 --resume-state el_state1.txt &&
      grep '^0 ' el_new$r.txt | cut -d' ' -f3- | tr ' ' '\n' >>el_keys$tag.txt
    lines+=("$(grep -c '^0 ' el_new$r.txt)")
    run_ok "elastic_fresh$tag" el_fresh$r "${EL[@]}" $ix --world 3 --rank $r --batch-size 3 --workers 3 \
      --epoch 1 &&
      check "elastic_next_epoch_fresh$tag rank $r" cmp -s <(grep '^1 ' el_new$r.txt) el_fresh$r.txt
  done
  check "elastic_equal_steps$tag ${lines[*]}" test "${lines[0]}" = "${lines[1]}" -a "${lines[1]}" = "${lines[2]}"
  py_check "elastic_every_key_once$tag" '
import sys
keys = [k for k in open(sys.argv[1]).read().split() if k]
want = {f"sample{i:09d}" for i in range(35)}
if set(keys) != want:
    print("missing", sorted(want - set(keys))[:5], "extra", sorted(set(keys) - want)[:5]); sys.exit(1)
if len(keys) - 35 >= 5:
    print("repeats", len(keys) - 35); sys.exit(1)
print(len(keys), "keys")' el_keys$tag.txt
done
# Elastic resume with exact mixing: two sources (d-00..01 twice per epoch,
# d-02..04 once), 2 ranks stopped after 2 batches, the state of rank 0
# resumed on 3 ranks with other batch sizes and workers (--json: the valid
# flags), with and without the sources' indexes: the valid rows before and
# after the stop are each key of source 0 twice and of source 1 once,
# none missed, none repeated (the padding is marked invalid); every new
# rank the same number of batches.
"$WDS" index 'd-{00..01}.tar' -o mx0.index.json >/dev/null 2>&1 || bad "wds index for the mixed elastic resume" ""
"$WDS" index 'd-{02..04}.tar' -o mx1.index.json >/dev/null 2>&1 || bad "wds index for the mixed elastic resume" ""
for ix in "" index; do
  tag=${ix:+_index}
  MX=(--source "d-{00..01}.tar:repeat=2${ix:+:index=mx0.index.json}"
    --source "d-{02..04}.tar${ix:+:index=mx1.index.json}"
    --decode cls --mode exact --seed 7 --shuffle-buffer 3 --max-sample-bytes 65536 --json)
  : >mx_rows$tag.txt
  for r in 0 1; do
    run_ok "mix_elastic_old$tag" mx_old$r "${MX[@]}" --world 2 --rank $r --batch-size 3 --workers 2 \
      --max-batches 2 --save-state mx_state$r.txt && cat mx_old$r.txt >>mx_rows$tag.txt
  done
  lines=()
  for r in 0 1 2; do
    run_ok "mix_elastic_new$tag" mx_new$r "${MX[@]}" --world 3 --rank $r --batch-size 2 --workers 1 \
      --resume-state mx_state0.txt && cat mx_new$r.txt >>mx_rows$tag.txt
    lines+=("$(grep -c . mx_new$r.txt)")
  done
  check "mix_elastic_equal_steps$tag ${lines[*]}" test "${lines[0]}" = "${lines[1]}" -a "${lines[1]}" = "${lines[2]}"
  py_check "mix_elastic_every_key_its_count$tag" '
import collections, json, sys
valid, pads = collections.Counter(), 0
for line in open(sys.argv[1]):
    b = json.loads(line)
    for k, v, s in zip(b["keys"], b["valid"], b["sources"]):
        if v:
            valid[(s, k)] += 1
        else:
            pads += 1
want = collections.Counter()
for i in range(35):
    want[(0 if i < 14 else 1, f"sample{i:09d}")] = 2 if i < 14 else 1
if valid != want:
    print("missing", sorted((want - valid).items())[:4], "extra", sorted((valid - want).items())[:4]); sys.exit(1)
print(sum(valid.values()), "valid rows,", pads, "padding rows")' mx_rows$tag.txt
done
if run_ok resume_res_full full_res "${RARGS[@]}"; then
  resume_case resume_resampled_e0 full_res.txt 0 3 2 "${RBASE[@]}"
  resume_case resume_resampled_e1 full_res.txt 1 4 1 "${RBASE[@]}"
fi

# -------------------------------------------------------------------- save
if run_ok save save "$SPEC" --decode 'cls,bin:bytes,json;txt' --batch-size 4 --mode exact \
  --world 2 --rank 1 --json --save saved; then
  py_check save_npy '
import json, os, sys, tarfile
import numpy as np
members = {}
for i in range(5):
    with tarfile.open(f"d-{i:02d}.tar") as t:
        for m in t.getmembers():
            members[m.name] = t.extractfile(m).read()
batches = [json.loads(l) for l in open(sys.argv[1])]
assert len(batches) == 5, f"{len(batches)} batches, want ceil(18/4) = 5"
files = set(os.listdir("saved"))
want = set()
for b in batches:
    stem = "saved/e%d-b%06d" % (b["epoch"], b["batch"])
    keys, n = b["keys"], len(b["keys"])
    cls = np.load(stem + ".cls.npy")
    assert cls.shape == (n,) and cls.dtype == np.int64, (stem, cls.shape, cls.dtype)
    assert list(cls) == [int(members[k + ".cls"]) for k in keys], (stem, cls)
    for field in ("bin", "json_txt"):
        ext = field.split("_")[0]
        data = np.load(f"{stem}.{field}.npy")
        off = np.load(f"{stem}.{field}.offsets.npy")
        assert data.dtype == np.uint8 and data.ndim == 1, (field, data.dtype)
        assert off.dtype == np.uint64 and off.shape == (n + 1,), (field, off.shape)
        assert off[0] == 0 and off[-1] == data.size, (field, off)
        for i, k in enumerate(keys):
            assert data[off[i]:off[i + 1]].tobytes() == members[f"{k}.{ext}"], (stem, field, k)
        want |= {os.path.basename(f"{stem}.{field}.npy"),
                 os.path.basename(f"{stem}.{field}.offsets.npy")}
    want.add(os.path.basename(stem + ".cls.npy"))
    # The rows: the valid mask as --json shows it, the keys and shards.
    valid = np.load(stem + ".__valid__.npy")
    assert valid.dtype == np.uint8 and list(valid) == b["valid"], (stem, valid)
    rows = json.load(open(stem + ".__rows__.json"))
    assert rows["keys"] == keys, (stem, rows)
    assert all(u.startswith("d-") and u.endswith(".tar") for u in rows["urls"]), rows
    want |= {os.path.basename(stem + ".__valid__.npy"),
             os.path.basename(stem + ".__rows__.json")}
assert files == want, sorted(files ^ want)
' save.txt
fi

# Images: decoded, resized to the requested size, NHWC uint8.
if run_ok save_images img img.tar --decode 'png:rgb:24x16,cls' --batch-size 2 --save imgs \
  --last-batch pad --workers 1; then
  py_check save_images_npy '
import numpy as np
b = [np.load(f"imgs/e0-b{i:06d}.png.npy") for i in range(3)]
assert all(x.shape == (2, 16, 24, 3) and x.dtype == np.uint8 for x in b), [x.shape for x in b]
cls = np.concatenate([np.load(f"imgs/e0-b{i:06d}.cls.npy") for i in range(3)])
assert list(cls[:5]) == [0, 1, 2, 3, 4], cls
# The fill colour (10k, 100, 200) survives resizing in the centre.
for i in range(5):
    px = b[i // 2][i % 2][8, 12]
    assert abs(int(px[0]) - 10 * i) <= 2 and abs(int(px[1]) - 100) <= 2, (i, px)
'
fi

# Keys with blanks and backslashes: \xHH in the text output, as they are in
# --json.
"$PYTHON3" - <<'EOF' || die "cannot make the key shard"
import io, tarfile
with tarfile.open("keys.tar", "w", format=tarfile.GNU_FORMAT) as t:
    for i, key in enumerate(["has space", "back\\slash", "tab\there", "caf\u00e9"]):
        data = str(i).encode()
        ti = tarfile.TarInfo(key + ".cls")
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
EOF
if run_ok keys_text keys keys.tar --decode cls --batch-size 4 --workers 1 &&
  run_ok keys_json keys_json keys.tar --decode cls --batch-size 4 --workers 1 --json; then
  check keys_escaped_text test "$(cat keys.txt)" = '0 0 has\x20space back\x5cslash tab\x09here café'
  py_check keys_json_strings '
import json, sys
b = json.loads(open(sys.argv[1]).read())
assert b["keys"] == ["has space", "back\\slash", "tab\there", "caf\u00e9"], b
' keys_json.txt
fi

# ------------------------------------------------------------- bad usage
# usage_case NAME FLAG-FRAGMENT ARGS...: exit 2 and a message naming the flag.
usage_case() {
  local name=$1 frag=$2
  shift 2
  run "usage_$name" "$@"
  if ((RC == 2)) && grep -q -- "$frag" "usage_$name.err"; then
    ok "usage_$name"
  else
    bad "usage_$name" "exit status $RC (want 2), stderr: $(head -c 300 "usage_$name.err")" \
      "want the message to mention '$frag'"
  fi
}
usage_case no_spec SPEC --decode cls
usage_case no_decode --decode "$SPEC"
usage_case bad_decode 'unknown option "zz"' "$SPEC" --decode cls:zz
usage_case batch_zero --batch-size "$SPEC" --decode cls --batch-size 0
usage_case batch_text --batch-size "$SPEC" --decode cls --batch-size four
usage_case batch_negative --batch-size "$SPEC" --decode cls --batch-size -1
usage_case mode --mode "$SPEC" --decode cls --mode exactly
usage_case last_batch --last-batch "$SPEC" --decode cls --last-batch fill
usage_case crop --crop "$SPEC" --decode cls --crop middle
usage_case on_error --on-error "$SPEC" --decode cls --on-error ignore
usage_case rank_world --rank "$SPEC" --decode cls --rank 2 --world 2
usage_case world_zero --world "$SPEC" --decode cls --world 0
usage_case resampled_needs_count --samples-per-epoch "$SPEC" --decode cls --mode resampled
# The options a mode ignores, given: an error naming the option and the mode.
usage_case resampled_shard_order '--no-shard-shuffle is not used in --mode resampled' \
  "$SPEC" --decode cls --mode resampled --samples-per-epoch 8 --no-shard-shuffle
usage_case exact_samples_per_epoch '--samples-per-epoch is not used in --mode exact' \
  "$SPEC" --decode cls --mode exact --samples-per-epoch 8
usage_case plain_index '--index is only used in --mode exact' \
  "$SPEC" --decode cls --index x.json
usage_case epochs_zero --epochs "$SPEC" --decode cls --epochs 0
usage_case prefetch_one --prefetch "$SPEC" --decode cls --prefetch 1
usage_case max_sample_bytes --max-sample-bytes "$SPEC" --decode cls --max-sample-bytes 12Q
usage_case unknown_flag frobnicate "$SPEC" --decode cls --frobnicate
usage_case jpeg_decode --jpeg-decode "$SPEC" --decode cls --jpeg-decode tpu

# --jpeg-decode gpu: without a GPU (or nvJPEG, or a CUDA build) an error
# saying why, never the CPU silently; with one, the CPU path's batches (the
# PNGs of img.tar are decoded by the workers either way: the same pixels).
run jpeg_cpu img.tar --decode 'jpg;png:rgb:24x16,cls' --batch-size 2 --save jpeg_cpu
run jpeg_gpu img.tar --decode 'jpg;png:rgb:24x16,cls' --batch-size 2 \
  --jpeg-decode gpu --save jpeg_gpu
if ((RC == 1)) && grep -q -- "--jpeg-decode gpu: GPU JPEG decoding: " jpeg_gpu.err; then
  ok jpeg_decode_gpu_says_why
elif ((RC == 0)) && cmp -s jpeg_cpu.txt jpeg_gpu.txt &&
  cmp -s jpeg_cpu/e0-b000000.jpg_png.npy jpeg_gpu/e0-b000000.jpg_png.npy; then
  ok jpeg_decode_gpu_equals_cpu
else
  bad jpeg_decode_gpu "exit status $RC: $(head -c 300 jpeg_gpu.err)"
fi
usage_case seed_overflow --seed "$SPEC" --decode cls --seed 99999999999999999999999

# ---------------------------------------------------------- missing shard
for mode in plain exact; do
  run "missing_$mode" 'd-00.tar' 'nope-1.tar' --decode cls --mode "$mode" --workers 2
  if ((RC == 1)) && grep -q 'nope-1.tar' "missing_$mode.err" &&
    grep -q '^wds batches: ' "missing_$mode.err"; then
    ok "missing_shard_$mode"
  else
    bad "missing_shard_$mode" "exit status $RC (want 1), stderr: $(head -c 300 "missing_$mode.err")"
  fi
done

# ------------------------------------------------------------------ bench
RC=0
timeout 120 "$WDS" bench --json "$SPEC" --decode cls --mode exact --batch-size 4 --world 2 --rank 0 \
  --epochs 2 >bench.json 2>bench.err || RC=$?
if ((RC == 0)); then
  py_check bench_loader_json '
import json, sys
b = json.load(open(sys.argv[1]))
assert b["batches"] == 10 and b["samples"] == 36, b
assert b["samples_per_s"] > 0 and b["peak_rss_mb"] > 0, b
assert set(b["stages"]) == {"read", "shuffle", "decode", "batch", "wait", "consumer"}, b
' bench.json
else
  bad bench_loader_json "exit status $RC: $(head -c 300 bench.err)"
fi
RC=0
timeout 60 "$WDS" bench "$SPEC" --batch-size 4 >bench2.txt 2>bench2.err || RC=$?
check bench_loader_needs_decode test "$RC" -eq 2
check bench_reader_still_works bash -c "'$WDS' bench '$SPEC' | grep -q 'samples 35'"

# ---------------------------------------------------- per-rank batch sizes
# --rank-batch-sizes 6,2,3 (sum 11) over the 35 samples: every rank
# ceil(35/11) = 4 lines of exactly its size (no partial batch, whatever
# --last-batch says), all 35 keys over the ranks plus 44 - 35 = 9 repeats;
# with --drop-last 3 lines each and 33 distinct keys; stderr names the
# rank's size and the step count; resampled: ceil(10 x 3 / 11) = 3 lines;
# --resume-at gives the tail; bad combinations exit 2 naming the flag.
rbs_case() {
  local name=$1 lines_want=$2 distinct_want=$3 rows_want=$4 r b
  shift 4
  local files=() sizes=(6 2 3)
  for r in 0 1 2; do
    run_ok "$name" "$name.r$r" "$SPEC" --decode cls --rank-batch-sizes 6,2,3 \
      --rank "$r" --seed 5 --shuffle-buffer 6 "$@" || return
    files+=("$name.r$r.txt")
    if [ "$(wc -l <"$name.r$r.txt")" != "$lines_want" ] ||
      [ -n "$(awk -v b="${sizes[r]}" 'NF - 2 != b' "$name.r$r.txt")" ] ||
      ! grep -q "rank $r of 3: batch size ${sizes[r]} (per rank: 6,2,3), $lines_want steps per epoch" "$name.r$r.err"; then
      bad "$name" "rank $r: $(wc -l <"$name.r$r.txt") lines; $(cat "$name.r$r.err")"
      return
    fi
  done
  read -r b rows distinct < <(cat "${files[@]}" >"$name.all" && stats "$name.all")
  if ((rows == rows_want)) && [[ $distinct_want == - || $distinct == "$distinct_want" ]]; then
    ok "$name: $lines_want steps on every rank, $rows rows, $distinct keys"
  else
    bad "$name" "$rows rows, $distinct distinct keys (want $rows_want, $distinct_want)"
  fi
}
rbs_case rank_sizes_exact 4 35 44 --mode exact
rbs_case rank_sizes_exact_pad_policy 4 35 44 --mode exact --last-batch pad
rbs_case rank_sizes_exact_drop_last 3 33 33 --mode exact --drop-last
rbs_case rank_sizes_resampled 3 - 33 --mode resampled --samples-per-epoch 10
if run_ok rank_sizes_resume rbs_res "$SPEC" --decode cls --rank-batch-sizes 6,2,3 \
  --rank 0 --seed 5 --shuffle-buffer 6 --mode exact --resume-at 1; then
  check rank_sizes_resume cmp -s rbs_res.txt <(tail -n +2 rank_sizes_exact.r0.txt)
fi
for args in "--rank-batch-sizes 6,2,3" "--rank-batch-sizes 6,2,3 --mode exact --world 2" \
  "--rank-batch-sizes 6,0,3 --mode exact" "--rank-batch-sizes 6,2 --mode exact --batch-size 6" \
  "--rank-batch-sizes 6,,2 --mode exact"; do
  rc=0
  # shellcheck disable=SC2086  # split on purpose
  "$WDS" batches "$SPEC" --decode cls $args >/dev/null 2>rbs.err || rc=$?
  if ((rc == 2)) && grep -q -- "--rank-batch-sizes" rbs.err; then
    ok "usage error: $args: $(head -1 rbs.err)"
  else
    bad "usage error: $args" "rc $rc: $(cat rbs.err)"
  fi
done
RC=0
timeout 120 "$WDS" bench --json "$SPEC" --decode cls --mode exact --rank-batch-sizes 6,2,3 \
  --rank 2 >rbs_bench.json 2>rbs_bench.err || RC=$?
if ((RC == 0)); then
  py_check rank_sizes_bench_json '
import json, sys
b = json.load(open(sys.argv[1]))
assert b["batch_size"] == 3 and b["batches"] == 4 and b["samples"] == 12, b
assert b["rank"] == 2 and b["rank_batch_sizes"] == [6, 2, 3], b
assert b["steps_per_epoch"] == 4, b
' rbs_bench.json
else
  bad rank_sizes_bench_json "exit status $RC: $(head -c 300 rbs_bench.err)"
fi

echo "$passed passed, $failed failed"
((failed == 0))
