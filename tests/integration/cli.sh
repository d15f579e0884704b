#!/usr/bin/env bash
# cli.sh — the command line as users meet it, for every
# `wds` command and wds-train:
#   - long options are spelled in full: a prefix (`--epoch` for `--epochs`)
#     is a usage error naming it and what it may have meant;
#   - a usage error is one line, "PROG: PROBLEM; see 'PROG --help'", exit 2;
#   - wds-train takes the loader options through the same parser as
#     `wds batches` (same messages), and its own numbers in the option
#     table's wording; a retired rendezvous flag (--master-port) is a usage
#     error naming what replaces it (mpirun, srun, torchrun);
#   - RANK without WORLD_SIZE (and the reverse) is a usage error everywhere;
#   - the messages users meet: what unknown bytes are, missing fields and
#     what a sample has, no doubled prefixes, --on-error skip's summary,
#     --save's valid mask and keys.
# Usage: cli.sh WDS_BINARY WDS_TRAIN_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
TRAIN=${2:-}
[[ -n $TRAIN ]] || {
  echo "usage: cli.sh WDS_BINARY WDS_TRAIN_BINARY" >&2
  exit 2
}
[[ $TRAIN == /* ]] || TRAIN=$PWD/$TRAIN
wds_test_setup cli "timeout gzip zstd xz bzip2" "$1"
unset RANK WORLD_SIZE LOCAL_RANK SLURM_PROCID SLURM_NTASKS \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE

"$WDS" synth --shards 2 --samples 6 --size 64 'd-%02d.tar' >/dev/null
S=d-00.tar

# run NAME PROG-ARGS...: PROG (wds or wds-train, by the first word) into
# NAME.out / NAME.err, its status in RC.
run() {
  local name=$1 prog=$2
  shift 2
  local bin=$WDS
  [[ $prog == wds-train ]] && bin=$TRAIN
  RC=0
  timeout 120 "$bin" "$@" >"$name.out" 2>"$name.err" || RC=$?
}

# usage NAME PROG FRAGMENT ARGS...: exit 2, and stderr is exactly one line
# "PROG: ...FRAGMENT...; see 'PROG --help'" (PROG: "wds ls", "wds-train").
usage() {
  local name=$1 prog=$2 frag=$3
  shift 3
  local bin=$WDS args=("$@")
  if [[ $prog == wds-train ]]; then
    bin=$TRAIN
  elif [[ $prog == "wds "* ]]; then
    args=("${prog#wds }" "$@") # the command's name
  fi
  RC=0
  timeout 120 "$bin" "${args[@]}" >"$name.out" 2>"$name.err" || RC=$?
  local lines first
  lines=$(wc -l <"$name.err")
  first=$(head -1 "$name.err")
  if ((RC == 2)) && ((lines == 1)) && [[ $first == "$prog: "* ]] &&
    [[ $first == *"$frag"* ]] && [[ $first == *"; see '$prog --help'" ]]; then
    ok "$name: $first"
  else
    bad "$name" "exit $RC (want 2), $lines lines (want 1), want '$prog: ...$frag...; see '$prog --help''" \
      "$(head -c 800 "$name.err")"
  fi
}

# ---- 1. exact option names, in every tool ----------------------------------
usage train_epoch wds-train "unknown option '--epoch' (did you mean '--epochs'?" \
  --train "$S" --epoch 2
usage train_epoch_eq wds-train "unknown option '--epoch'" --train "$S" --epoch=2
usage train_ambiguous wds-train "unknown option '--s'" --train "$S" --s 2
usage batches_epo "wds batches" "did you mean '--epoch' or '--epochs'?" \
  --decode cls --epo 1 "$S"
usage batches_dec "wds batches" "unknown option '--dec'" --dec cls "$S"
usage bench_work "wds bench" "unknown option '--work'" --decode cls --work 2 "$S"
usage ls_jso "wds ls" "unknown option '--jso' (did you mean '--json'?" --jso "$S"
usage ls_after_spec "wds ls" "unknown option '--sum'" "$S" --sum
usage cat_lim "wds cat" "unknown option '--lim'" --lim 1 "$S"
usage index_out "wds index" "unknown option '--out'" --out x.json "$S"
usage verify_req "wds verify" "unknown option '--req'" --req cls "$S"
usage synth_shard "wds synth" "unknown option '--shard'" --shard 2 'x-%d.tar'
usage write_maxc "wds write" "unknown option '--maxc'" --maxc 3 -o 'o-%d.tar' "$S"
usage expand_max "wds expand" "unknown option '--max'" --max 3 "$S"
usage ls_flag_value "wds ls" "option '--json' takes no value" --json=yes "$S"
usage ls_missing_value "wds ls" "option '--max-urls' needs a value" "$S" --max-urls
usage ls_short "wds ls" "unknown option '-x'" -x "$S"
usage train_missing_value wds-train "option '--train' needs a value" --train
# The full names still work, = and separate values alike.
run batches_full wds batches --decode=cls --epoch 0 --epochs=2 "$S"
if ((RC == 0)) && [[ $(wc -l <batches_full.out) == 12 ]]; then
  ok "full option names (= and separate values) work"
else
  bad "full option names" "exit $RC" "$(head -c 400 batches_full.err)"
fi
# "--" ends the options: what follows is an operand however it is spelled.
run ls_dashdash wds ls -- "$S"
expect_rc "ls -- SPEC" 0 ls_dashdash

# ---- 3. usage errors: one line, the help to read, exit 2 -------------------
usage wds_unknown wds "unknown command 'frob'" frob
usage wds_nothing wds "no command given"
usage ls_nospec "wds ls" "expected a SPEC"
usage cat_nospec "wds cat" "expected a SPEC"
usage verify_nospec "wds verify" "expected a SPEC"
usage index_nospec "wds index" "expected a SPEC"
usage bench_nospec "wds bench" "expected a SPEC"
usage batches_nospec "wds batches" "expected a SPEC" --decode cls
usage batches_nodecode "wds batches" "--decode FIELDS is required" "$S"
usage expand_nospec "wds expand" "no SPEC given"
usage synth_nopattern "wds synth" "expected one PATTERN"
usage synth_pattern "wds synth" "needs one integer conversion" --shards 2 x.tar
usage write_noinput "wds write" "no INPUT" -o 'o-%d.tar'
usage write_badvalue "wds write" "--maxcount needs a positive number" --maxcount x "$S"
usage cat_badvalue "wds cat" "--limit needs a number > 0" --limit 0 "$S"
usage verify_badvalue "wds verify" "--max-urls needs a number" --max-urls x "$S"
usage batches_badvalue "wds batches" "--batch-size needs a whole number" \
  --decode cls --batch-size 0 "$S"
usage train_notrain wds-train "--train SPEC is required"
usage train_badvalue wds-train "--channels" --train "$S" --channels 2
usage train_operand wds-train "unexpected argument 'extra'" --train "$S" extra

# ---- 2. one loader option grammar: wds-train parses as wds batches ---------
# The same flag and value give the same message, but for the program name.
same_message() {
  local name=$1 flag=$2 value=$3
  run "$name.b" wds batches --decode cls "$flag" "$value" "$S"
  local rcb=$RC
  run "$name.t" wds-train --train "$S" "$flag" "$value"
  local mb mt
  mb=$(sed "s/^wds batches: //; s/; see 'wds batches --help'\$//" "$name.b.err")
  mt=$(sed "s/^wds-train: //; s/; see 'wds-train --help'\$//" "$name.t.err")
  if ((rcb == 2 && RC == 2)) && [[ -n $mb && $mb == "$mt" ]]; then
    ok "$name: one message: $mt"
  else
    bad "$name" "batches: exit $rcb: $(cat "$name.b.err")" "wds-train: exit $RC: $(cat "$name.t.err")"
  fi
}
same_message read_timeout --read-timeout -1
same_message max_window --max-window 12Q
same_message crop --crop middle
same_message last_batch --last-batch fill
same_message workers --workers 0
same_message workers_max --workers 257
same_message shuffle_buffer --shuffle-buffer x
same_message spe --samples-per-epoch 0
run train_help wds-train --help
if ((RC == 0)) && grep -q -- '--read-timeout S ' train_help.out &&
  grep -q -- '--crop HOW ' train_help.out && grep -q -- '--workers N ' train_help.out &&
  grep -q -- '--max-window SIZE ' train_help.out && grep -q 'A SIZE is' train_help.out; then
  ok "wds-train --help shows the loader options' shared help"
else
  bad "wds-train --help" "exit $RC" "$(tail -20 train_help.out)"
fi
# Its own numbers have the tools' grammar too (digits only) and the option
# table's wording; --seed is the loader's, and reads as `wds batches` says it.
usage train_plus wds-train '--epochs needs a whole number of at least 1, not "+3"' --train "$S" --epochs +3
usage train_blank wds-train '--seed needs a whole number of at least 0, not " 3"' --train "$S" --seed ' 3'
usage train_batch_zero wds-train '--batch-size needs a whole number in 1..1048576, not "0"' --train "$S" --batch-size 0
usage train_ranks wds-train '--ranks needs a whole number in 1..1024, not "0"' --train "$S" --ranks 0
usage train_gpus wds-train '--gpus needs a whole number in 1..1024, not "0"' --train "$S" --gpus 0
usage train_retired wds-train '--master-port is gone with' --train "$S" --master-port 70000
same_message seed --seed x
# wds-train keeps its own limits on what it takes through the shared parser.
usage train_mode_plain wds-train "--mode plain" --train "$S" --mode plain
usage train_image_size wds-train "--image-size 5000" --train "$S" --image-size 5000

# ---- 4. the launcher's environment -----------------------------------------
env_case() {
  local name=$1 prog=$2 var=$3
  shift 3
  local bin=$WDS
  [[ $prog == wds-train ]] && bin=$TRAIN
  RC=0
  env "$var" timeout 120 "$bin" "$@" >"$name.out" 2>"$name.err" || RC=$?
  if ((RC == 2)) && grep -q "^$prog: .*WORLD_SIZE" "$name.err"; then
    ok "$name: $(head -1 "$name.err")"
  else
    bad "$name" "exit $RC (want 2)" "$(head -c 600 "$name.err")"
  fi
}
env_case rank_only_batches "wds batches" RANK=1 batches --decode cls "$S"
env_case rank_only_bench "wds bench" RANK=1 bench --decode cls "$S"
env_case rank_only_train wds-train RANK=1 --train "$S" --device cpu
env_case world_only_batches "wds batches" WORLD_SIZE=2 batches --decode cls "$S"
# Flags given: the environment is not read.
RC=0
RANK=1 "$WDS" batches --decode cls --rank 0 --world 1 "$S" >flags.out 2>flags.err || RC=$?
expect_rc "--rank/--world given: RANK alone in the environment is not read" 0 flags

# ---- 5. messages -----------------------------------------------------------
# msg NAME FRAGMENT PROG-ARGS...: exits non-zero, stderr+stdout has FRAGMENT
# and never a doubled "truncated: truncated".
msg() {
  local name=$1 frag=$2
  shift 2
  run "$name" "$@"
  cat "$name.out" "$name.err" >"$name.all"
  if ((RC != 0)) && grep -qF -- "$frag" "$name.all" && ! grep -q 'truncated: truncated' "$name.all"; then
    ok "$name: $(grep -F -- "$frag" "$name.all" | head -1)"
  else
    bad "$name" "exit $RC, want '$frag'" "$(head -c 600 "$name.all")"
  fi
}
: >empty.tar
msg verify_empty "empty.tar: truncated: empty input (0 bytes): not a tar archive" wds verify empty.tar
msg ls_empty "empty input (0 bytes)" wds ls empty.tar
gzip -c empty.tar >empty.tar.gz
msg ls_empty_gz "empty input (gzip data with nothing in it" wds ls empty.tar.gz
# Cut tars and compressed streams: "truncated" said once.
head -c 700 "$S" >cut.tar
msg verify_cut "truncated" wds verify cut.tar
head -c 300 "$S" >cut_header.tar
msg verify_cut_header "stream truncated inside the tar header at offset 0" wds verify cut_header.tar
zstd -q -c "$S" | head -c 200 >cut.tar.zst
msg verify_cut_zst "truncated" wds verify cut.tar.zst
gzip -c "$S" | head -c 200 >cut.tar.gz
msg verify_cut_gz "truncated" wds verify cut.tar.gz
# What the bytes are, whatever reads them (a tool, the loader, a pipe).
printf '<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head></html>\n' >page.tar
{
  printf '<html>\n'
  for _ in $(seq 40); do printf '<p>The specified key does not exist.</p>\n'; done
  printf '</html>\n'
} >bigpage.tar
msg html_small "not a tar archive: the data is an HTML page" wds ls page.tar
msg html_big "not a tar archive: the data is an HTML page" wds ls bigpage.tar
msg html_pipe "an error page from a web server?" wds ls "pipe:cat page.tar"
msg html_loader "the data is an HTML page" wds batches --decode cls page.tar
msg html_verify "the data is an HTML page" wds verify bigpage.tar
printf '<?xml version="1.0"?><Error><Code>NoSuchKey</Code></Error>' >s3.tar
msg xml "the data is an XML document" wds ls s3.tar
"$PYTHON3" -c '
import zipfile
with zipfile.ZipFile("shards.zip", "w") as z:
    z.writestr("a.txt", "hello")
with zipfile.ZipFile("big.zip", "w") as z:
    z.writestr("a.bin", bytes(range(256)) * 8)'
msg zip_small "not a tar archive: the data is a zip archive" wds ls shards.zip
msg zip_big "not a tar archive: the data is a zip archive" wds cat -f big.zip
gzip -c page.tar >page.tar.gz
msg gz_html "gzip data whose content is an HTML page" wds ls page.tar.gz
zstd -q -c bigpage.tar >page.tar.zst
msg zst_html "zstd data whose content is an HTML page" wds ls page.tar.zst
printf 'just some text\n' | xz -c >text.tar.xz
msg xz_text "xz data whose content is text" wds ls text.tar.xz
head -c 4000 /dev/zero | tr '\0' '\1' | bzip2 -c >ones.tar.bz2
msg bz2_binary "bzip2 data whose content is not tar" wds ls ones.tar.bz2
# A tar that is a tar is still read (the sniffing only names failures).
run ls_ok wds ls "pipe:cat $S"
expect_rc "a tar through a pipe still reads" 0 ls_ok

# A missing field names every field the sample has, wanted or not.
msg missing_field "has no field 'png' (has: bin, cls, json)" wds batches --decode png "$S"
msg missing_alts "has no field 'png;jpg' (has: bin, cls, json)" wds batches --decode 'cls,png;jpg' "$S"

# --on-error skip sums up what it skipped on stderr.
head -c 2600 d-01.tar >cut01.tar
run skip wds batches --decode bin,cls --on-error skip "$S" cut01.tar
if ((RC == 0)) && grep -q '^wds batches: --on-error skip: skipped 1 error; .*; the first:$' skip.err &&
  grep -q '^  skipped: cut01.tar: ' skip.err; then
  ok "--on-error skip summary: $(tr '\n' '|' <skip.err)"
else
  bad "--on-error skip summary" "exit $RC" "$(cat skip.err)"
fi
run noskip wds batches --decode bin,cls --on-error skip "$S"
if ((RC == 0)) && [[ ! -s noskip.err ]]; then
  ok "--on-error skip with nothing skipped says nothing"
else
  bad "--on-error skip, nothing skipped" "exit $RC" "$(cat noskip.err)"
fi

# --save writes each batch's valid mask and its rows' keys and shards.
rm -rf saved
run save wds batches --decode bin,cls --mode exact --batch-size 5 --last-batch pad \
  --no-shard-shuffle --save saved "$S" d-01.tar
if ((RC == 0)) && "$PYTHON3" - saved <<'PY'; then
import json, os, sys
d = sys.argv[1]
def npy(path):  # uint8 1-D .npy: the last bytes are the data
    raw = open(path, "rb").read()
    hlen = int.from_bytes(raw[8:10], "little")
    header = raw[10:10 + hlen].decode()
    assert "'|u1'" in header, header
    return list(raw[10 + hlen:])
b0, b1, b2 = (npy(f"{d}/e0-b{i:06d}.__valid__.npy") for i in range(3))
assert b0 == [1] * 5 and b1 == [1] * 5 and b2 == [1, 1, 0, 0, 0], (b0, b1, b2)
rows = [json.load(open(f"{d}/e0-b{i:06d}.__rows__.json")) for i in range(3)]
keys = [k for r in rows for k in r["keys"]]
assert len(keys) == 15 and len(set(keys[:12])) == 12, keys
assert all(u in ("d-00.tar", "d-01.tar") for r in rows for u in r["urls"]), rows
assert os.path.exists(f"{d}/e0-b000002.cls.npy")  # the fields as before
PY
  ok "--save: __valid__.npy marks the padding, __rows__.json has keys and urls"
else
  bad "--save valid and rows" "exit $RC" "$(cat save.err)"
fi

echo "$passed passed, $failed failed"
((failed == 0))
