#!/usr/bin/env bash
# Tool test: pipe: commands read from files. An @FILE list or an
# index may come from anywhere (a download), so a pipe: command read from one
# is refused unless --allow-pipe-from-files is given, with a message naming
# the file, the line (or index entry) and the option; a pipe: typed on the
# command line runs as before. Every command that reads specs is checked:
# wds ls, cat, verify, index, bench, batches, expand, write and wds-train;
# the index through wds batches --index and wds ls --summary --index. A
# marker file shows that a refused command never ran (and that an allowed
# one did). Every command's --help names the option.
#
# Usage: pipe_files.sh WDS_BINARY WDS_TRAIN_BINARY
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup pipe_files "timeout" "$1"
TRAIN=$2
[[ $TRAIN == /* ]] || TRAIN=$OLDPWD/$TRAIN

"$WDS" synth --shards 2 --samples 5 --size 100 s-%d.tar >/dev/null
# the command leaves a marker when it runs
printf 's-0.tar\n# a comment\npipe:touch ran && cat s-1.tar\n' >list.txt
"$WDS" ls s-0.tar s-1.tar >local.ls

refused() { # refused NAME OUT FILE_AND_LINE: OUT.err has the refusal, exit 1
  # (2 for cat, verify and index, which take a bad spec as a usage error),
  # and the command never ran (no marker)
  if [[ $RC == 1 || $RC == 2 ]] && [[ ! -e ran ]] && grep -qF "$3: \"pipe:touch ran && cat s-1.tar\" is a pipe: command read from a file, which is not run unless allowed (--allow-pipe-from-files" "$2.err" && [[ ! -e ran ]]; then
    ok "$1"
  else
    bad "$1" "exit $RC, ran: $([[ -e ran ]] && echo yes || echo no)" "$(head -c 400 "$2.err")"
  fi
  rm -f ran
}

# -- @FILE lists, every command --
w ls ls @list.txt
refused ls_refuses ls "list.txt line 3"
w lsok ls --allow-pipe-from-files @list.txt
if [[ $RC == 0 ]] && cmp -s local.ls lsok.out && [[ -e ran ]]; then ok ls_allowed_runs_it; else bad ls_allowed_runs_it "exit $RC" "$(head -3 lsok.err)"; fi
rm -f ran
w typed ls s-0.tar "pipe:touch ran && cat s-1.tar"
if [[ $RC == 0 ]] && cmp -s local.ls typed.out; then ok typed_pipe_runs; else bad typed_pipe_runs "exit $RC" "$(head -3 typed.err)"; fi
rm -f ran
# nested: the list that holds the line is named
printf '@list.txt\n' >outer.txt
w nested ls @outer.txt
refused nested_list_names_inner_file nested "list.txt line 3"

for cmd in cat verify index bench expand; do
  w "c$cmd" "$cmd" @list.txt
  refused "${cmd}_refuses" "c$cmd" "list.txt line 3"
  w "a$cmd" "$cmd" --allow-pipe-from-files @list.txt
  if [[ $RC == 0 ]]; then ok "${cmd}_allowed"; else bad "${cmd}_allowed" "exit $RC" "$(head -3 "a$cmd.err")"; fi
  rm -f ran
done
w cwrite write -o out-%d.tar @list.txt
refused write_refuses cwrite "list.txt line 3"
w awrite write --allow-pipe-from-files -o out-%d.tar @list.txt
if [[ $RC == 0 && -s out-0.tar ]]; then ok write_allowed; else bad write_allowed "exit $RC" "$(head -3 awrite.err)"; fi
rm -f ran
B=(--mode exact --decode bin,cls --batch-size 4 --workers 1)
w cbatch batches "${B[@]}" @list.txt
refused batches_refuses cbatch "list.txt line 3"
"$WDS" batches "${B[@]}" s-0.tar s-1.tar >local.batches
w abatch batches --allow-pipe-from-files "${B[@]}" @list.txt
if [[ $RC == 0 ]] && cmp -s local.batches abatch.out; then ok batches_allowed_equals_local; else bad batches_allowed_equals_local "exit $RC" "$(head -3 abatch.err)"; fi
rm -f ran

RC=0
timeout 60 "$TRAIN" --train @list.txt --device cpu --steps 1 >train.out 2>train.err || RC=$?
refused train_refuses train "list.txt line 3"
RC=0
timeout 60 "$TRAIN" --allow-pipe-from-files --train @list.txt --device cpu --steps 1 >train2.out 2>train2.err || RC=$?
if ! grep -q "is a pipe: command read from a file" train2.err; then ok train_allowed; else bad train_allowed "$(head -3 train2.err)"; fi
rm -f ran

# -- an index naming a pipe: command --
"$WDS" index --allow-pipe-from-files -o ix.json s-0.tar "pipe:touch ran && cat s-1.tar" 2>/dev/null
rm -f ran
w ixb batches "${B[@]}" --index ix.json s-0.tar "pipe:touch ran && cat s-1.tar"
refused index_refused_by_batches ixb "ix.json: shardlist entry 2"
w ixbok batches "${B[@]}" --allow-pipe-from-files --index ix.json s-0.tar "pipe:touch ran && cat s-1.tar"
if [[ $RC == 0 ]] && cmp -s local.batches ixbok.out; then ok index_allowed_equals_local; else bad index_allowed_equals_local "exit $RC" "$(head -3 ixbok.err)"; fi
rm -f ran
w ixs ls --summary --index ix.json s-0.tar "pipe:touch ran && cat s-1.tar"
refused index_refused_by_ls_summary ixs "ix.json: shardlist entry 2"
w ixsok ls --allow-pipe-from-files --summary --index ix.json s-0.tar "pipe:touch ran && cat s-1.tar"
if [[ $RC == 0 ]]; then ok ls_summary_index_allowed; else bad ls_summary_index_allowed "exit $RC" "$(head -3 ixsok.err)"; fi
rm -f ran

# -- the help of every command names the option --
for cmd in ls cat verify index bench batches expand write; do
  help=$("$WDS" "$cmd" --help 2>&1 || true)
  if [[ $help == *--allow-pipe-from-files* ]]; then ok "help_$cmd"; else bad "help_$cmd" "no --allow-pipe-from-files in wds $cmd --help"; fi
done
help=$("$TRAIN" --help 2>&1 || true)
if [[ $help == *--allow-pipe-from-files* ]]; then ok help_train; else bad help_train "no --allow-pipe-from-files in wds-train --help"; fi

echo "$passed passed, $failed failed"
((failed == 0))
