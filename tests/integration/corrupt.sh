#!/usr/bin/env bash
# Integration test: damaged shards and failing sources.
#
# From a small valid GNU tar made at test time (3 samples of two ~3 KB members),
# derives damaged copies (cut inside a header, inside data, at a 512-byte
# boundary without the end-of-archive blocks; a flipped header byte; a bad size
# field with a correct checksum; garbage; cut .zst/.gz/.xz/.bz2; a repeated
# extension) and checks for each that `wds ls --json`
#   * exits with status 1 and says `wds ls: <url>: <detail>` on stderr, the
#     detail worded as the CLI contract says (member in quotes, `offset N`
#     within the damaged header/member);
#   * prints on stdout only complete, correct samples that precede the damage
#     (a prefix of the intact listing; never a partial sample).
# Also: pipe:, stdin and file:// read the same samples as the file; a failing
# pipe: command (also one that fails after sending the whole shard), a
# missing file and a usage error are reported; with two specs, the first
# shard's samples come out before the second one's error. A .tar.gz larger
# than the reading thread's ring with its gzip trailer CRC flipped gives
# the same samples and error with WDS_READ_THREAD=1 and 0: none of the
# member's samples while it is held to its check, all but the last under
# a lower --max-unverified.
#
# Usage: corrupt.sh WDS_BINARY [SHARED_TESTDATA]   (the second is unused)
# Prints `ok NAME` / `FAIL NAME` per case and a final `N passed, N failed`.
# Set WDS_TEST_KEEP=1 to keep the temporary directory.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
wds_test_setup corrupt "zstd gzip xz bzip2 timeout" "$@"
mkdir out src

fx() { "$PYTHON3" "$HERE/fixtures.py" "$@"; }
# expected SPEC TAR [N]: the first N samples of plain TAR, with __url__ SPEC.
expected() {
  local rc=0
  "$PYTHON3" "$HERE/expect_from_tree.py" "$2" --url "$1" ${3:+--limit "$3"} 2>"$TMP/expect.err" || rc=$?
  # 3: stopped at a duplicate extension (the samples before it are printed).
  ((rc == 0 || rc == 3)) || die "expect_from_tree.py failed on $2: $(cat "$TMP/expect.err")"
}

# ---------------------------------------------------------------- fixtures
GTAR_OPTS=(--format=gnu --mtime=@1700000000 --owner=0 --group=0 --numeric-owner -C src)
sizes=(3000 3100 2900 3050 3010 2999)
i=0
for s in s000 s001 s002; do
  fx payload "src/$s.txt" "${sizes[i]}" "$s.txt" --text
  fx payload "src/$s.bin" "${sizes[i + 1]}" "$s.bin"
  i=$((i + 2))
done
"$GTAR" -cf intact.tar "${GTAR_OPTS[@]}" s000.txt s000.bin s001.txt s001.bin s002.txt s002.bin
# The damaged member is s001.bin (sample #1): only sample #0 may precede the error.
H=$(fx offset intact.tar s001.bin header)
D=$(fx offset intact.tar s001.bin data)
E=$(fx offset intact.tar s001.bin end)
((H > 0 && D == H + 512 && E > D)) || die "unexpected layout of intact.tar (H=$H D=$D E=$E)"

fx cut intact.tar cut-header.tar $((H + 200))
fx cut intact.tar cut-data.tar $((D + 1000))
fx cut intact.tar no-end.tar "$E"
fx flip intact.tar checksum.tar "$H"
fx set-size intact.tar size-x.tar "$H" 0000000x123
fx set-size intact.tar size-nonoctal.tar "$H" 00000009999
fx garbage garbage.tar 4096 1
zstd -q -c checksum.tar >checksum.tar.zst
gzip -n -c checksum.tar >checksum.tar.gz
zstd -q -c intact.tar >intact.tar.zst
gzip -n -c intact.tar >intact.tar.gz
xz -c intact.tar >intact.tar.xz
bzip2 -c intact.tar >intact.tar.bz2
for c in zst gz xz bz2; do
  n=$(stat -c %s "intact.tar.$c")
  fx cut "intact.tar.$c" "cut.tar.$c" $((n / 2))
done
# A repeated extension: d000.jpg then d000.JPG.
for m in s0.jpg s0.txt d000.jpg d000.JPG s2.txt; do fx payload "src/$m" 100 "$m"; done
"$GTAR" -cf dup.tar "${GTAR_OPTS[@]}" s0.jpg s0.txt d000.jpg d000.JPG s2.txt

# ------------------------------------------------------------------ checker
pass_case() { echo "ok $1"; passed=$((passed + 1)); }
fail_case() {
  echo "FAIL $1"
  shift
  local line
  for line in "$@"; do printf '    %s\n' "$line"; done
  failed=$((failed + 1))
}

# check NAME [options] -- SPEC...
#   --status N        exit status wanted (default 1)
#   --url U           stderr must contain `wds ls: U: ` (default: the last SPEC)
#   --has S           stderr contains S (literal, case-sensitive)
#   --re-i RE         stderr matches extended regex RE, ignoring case
#   --detail-re RE    the detail after `wds ls: U: ` matches extended regex RE
#   --offset LO HI    stderr has `offset N` with LO <= N <= HI
#   --offset-eq N     stderr has `offset N`
#   --stdout FILE     stdout lists a prefix of the reference listing FILE
#   --expect TAR N    stdout lists a prefix of the first N (or all) samples of
#                     plain TAR, each with __url__ = the last SPEC
#   --min N           ... of at least N samples (default 0)
#   --stdin FILE      feed FILE through a pipe on stdin
LAST_OFFSET=
check() {
  local name=$1
  shift
  local status=1 url='' stdout_ref='' expect_tar='' expect_n='' min=0 stdin='' lo='' hi=
  local -a has=() re_i=() detail_re=() why=()
  while (($#)); do
    case $1 in
      --status) status=$2; shift 2 ;;
      --url) url=$2; shift 2 ;;
      --has) has+=("$2"); shift 2 ;;
      --re-i) re_i+=("$2"); shift 2 ;;
      --detail-re) detail_re+=("$2"); shift 2 ;;
      --offset) lo=$2; hi=$3; shift 3 ;;
      --offset-eq) lo=$2; hi=$2; shift 2 ;;
      --stdout) stdout_ref=$2; shift 2 ;;
      --expect) expect_tar=$2; expect_n=$3; shift 3 ;;
      --min) min=$2; shift 2 ;;
      --stdin) stdin=$2; shift 2 ;;
      --) shift; break ;;
      *) die "check $name: unknown option $1" ;;
    esac
  done
  local -a specs=("$@")
  [[ -n $url || $status != 1 ]] || url=${specs[-1]}
  local out="out/$name.out" err="out/$name.err" rc=0
  if [[ -n $expect_tar ]]; then
    stdout_ref="out/$name.ref"
    [[ $expect_n == all ]] && expect_n=''
    expected "${specs[-1]}" "$expect_tar" "$expect_n" >"$stdout_ref"
  fi
  if [[ -n $stdin ]]; then
    # Through a pipe (not seekable); only wds's status counts.
    timeout 60 "$WDS" ls --json "${specs[@]}" < <(cat "$stdin") >"$out" 2>"$err" || rc=$?
  else
    timeout 60 "$WDS" ls --json "${specs[@]}" >"$out" 2>"$err" </dev/null || rc=$?
  fi
  ((rc != 124)) || why+=("timed out after 60 s")
  ((rc == status)) || why+=("exit status $rc, want $status")
  if [[ -n $url ]]; then
    grep -Fq -- "wds ls: $url: " "$err" || why+=("stderr lacks 'wds ls: $url: '")
    local s
    for s in "${has[@]}"; do
      grep -Fq -- "$s" "$err" || why+=("stderr lacks '$s'")
    done
    for s in "${re_i[@]}"; do
      grep -Eiq -- "$s" "$err" || why+=("stderr does not match /$s/i")
    done
    for s in "${detail_re[@]}"; do
      "$PYTHON3" - "$err" "wds ls: $url: " "$s" <<'EOF' || why+=("the detail does not match /$s/")
import re, sys
text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
i = text.find(sys.argv[2])
sys.exit(0 if i >= 0 and re.search(sys.argv[3], text[i + len(sys.argv[2]):]) else 1)
EOF
    done
    if [[ -n $lo ]]; then
      local found='' n
      LAST_OFFSET=''
      while read -r n; do
        [[ -n $LAST_OFFSET ]] || LAST_OFFSET=$n
        if ((n >= lo && n <= hi)); then found=1; fi
      done < <(grep -o 'offset [0-9]\+' "$err" | cut -d' ' -f2)
      [[ -n $found ]] || why+=("stderr has no 'offset N' with $lo <= N <= $hi")
    fi
  fi
  if [[ -n $stdout_ref ]]; then
    local msg
    msg=$("$PYTHON3" "$HERE/compare_listings.py" --expected "$stdout_ref" --actual "$out" \
      --prefix --min-count "$min" 2>&1) || why+=("stdout: $msg")
  elif [[ -s $out && $status != 0 ]]; then
    why+=("stdout should be empty, got: $(head -c 300 "$out")")
  fi
  if ((${#why[@]})); then
    fail_case "$name" "${why[@]}" "stderr: $(head -c 600 "$err")"
  else
    pass_case "$name"
  fi
}

# ------------------------------------------------------------------- cases
P=$TMP
check cut_header --has truncated --has offset --offset "$H" $((H + 200)) \
  --expect intact.tar 1 -- "$P/cut-header.tar"
check cut_data --has truncated --has '"s001.bin"' --has offset --offset "$H" $((D + 1000)) \
  --expect intact.tar 1 -- "$P/cut-data.tar"
check no_end_marker --has truncated --has end-of-archive \
  --expect intact.tar 2 -- "$P/no-end.tar"
check checksum --has checksum --has offset --offset "$H" $((H + 511)) \
  --expect intact.tar 1 -- "$P/checksum.tar"
CHECKSUM_OFFSET=$LAST_OFFSET
check size_x --has size --has offset --offset "$H" $((H + 511)) \
  --expect intact.tar 1 -- "$P/size-x.tar"
check size_nonoctal --has size --has offset --offset "$H" $((H + 511)) \
  --expect intact.tar 1 -- "$P/size-nonoctal.tar"
check garbage --has 'not a tar archive' -- "$P/garbage.tar"
# Offsets count in the decompressed stream: the same as in the plain tar.
for c in zst gz; do
  check "checksum_$c" --has checksum --offset-eq "${CHECKSUM_OFFSET:-$H}" \
    --expect intact.tar 1 -- "$P/checksum.tar.$c"
done
check cut_zst --has truncated --expect intact.tar 2 -- "$P/cut.tar.zst"
check cut_gz --re-i 'gzip|truncated' --expect intact.tar 2 -- "$P/cut.tar.gz"
check cut_xz --expect intact.tar 2 -- "$P/cut.tar.xz"
check cut_bz2 --expect intact.tar 2 -- "$P/cut.tar.bz2"
check duplicate --has duplicate --has '"d000.JPG"' \
  --expect dup.tar 1 -- "$P/dup.tar"

# Sources reading the intact shard.
check file --status 0 --expect intact.tar all --min 3 -- "$P/intact.tar"
check file_url --status 0 --expect intact.tar all --min 3 \
  -- "file://$P/intact.tar"
check pipe_cat --status 0 --expect intact.tar all --min 3 \
  -- "pipe:cat $P/intact.tar"
check stdin --status 0 --stdin intact.tar --expect intact.tar all --min 3 -- -
check stdin_zst --status 0 --stdin intact.tar.zst --expect intact.tar all --min 3 -- -
check stdin_garbage --stdin garbage.tar --has 'not a tar archive' -- -
check pipe_cut_data --has truncated --has '"s001.bin"' --offset "$H" $((D + 1000)) \
  --expect intact.tar 1 -- "pipe:cat $P/cut-data.tar"

# Failing sources.
check pipe_cat_missing --detail-re 'exit[^0-9]*1' -- "pipe:cat $P/missing.tar"
check pipe_exit_3 --detail-re 'exit[^0-9]*3' -- "pipe:exit 3"
# The whole shard arrives, then the command fails: still an error.
check pipe_data_then_exit_3 --detail-re 'exit[^0-9]*3' \
  --expect intact.tar all -- "pipe:cat $P/intact.tar; exit 3"
check missing_file --has 'No such file' -- "$P/missing.tar"
check missing_file_url --has 'No such file' --has "$P/missing.tar" -- "file://$P/missing.tar"

# Two specs, the second damaged: the first shard's samples come out first.
{
  expected "$P/intact.tar" intact.tar
  expected "$P/cut-data.tar" intact.tar 1
} >out/two.ref
check two_shards_second_bad --has truncated --has '"s001.bin"' --stdout out/two.ref --min 3 \
  -- "$P/intact.tar" "$P/cut-data.tar"
# The error names the damaged shard, not the good one.
if grep -Fq "wds ls: $P/intact.tar:" out/two_shards_second_bad.err; then
  fail_case two_shards_error_names_second "stderr blames $P/intact.tar"
else
  pass_case two_shards_error_names_second
fi

# Usage error.
check usage --status 2 -- --no-such-option "$P/intact.tar"

# A .tar.gz whose gzip trailer CRC is flipped, larger than the reading
# thread's 1 MiB ring (600 samples of 3 KB of noise: about 1.9 MB
# compressed): with the thread (WDS_READ_THREAD=1) and without it (=0) the
# same samples come out, then the same error, naming the same place. The
# member is held until its check (max_unverified_bytes, 64 MiB by default),
# so none of its samples comes out; with --max-unverified below the member's
# size they come out unchecked, every one but the last before the error.
"$PYTHON3" - big.tar <<'PY' || die "generating big.tar"
import hashlib, io, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT) as tf:
    for i in range(600):
        data = b"".join(hashlib.sha256(f"{i}:{j}".encode()).digest() for j in range(94))
        for ext, d in (("bin", data), ("cls", str(i % 10).encode())):
            ti = tarfile.TarInfo(f"b{i:04d}.{ext}")
            ti.size, ti.mtime = len(d), 1700000000
            tf.addfile(ti, io.BytesIO(d))
PY
gzip -n -c big.tar >big-crc.tar.gz
"$PYTHON3" -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-8] ^= 0xff; open(sys.argv[1], "wb").write(b)' big-crc.tar.gz
for held in 1 0; do
  why=()
  opt=()
  ((held)) || opt=(--max-unverified 256K)
  for t in 0 1; do
    rc=0
    WDS_READ_THREAD=$t timeout 60 "$WDS" ls "${opt[@]}" "$P/big-crc.tar.gz" >"out/crc$t.out" 2>"out/crc$t.err" || rc=$?
    ((rc == 1)) || why+=("WDS_READ_THREAD=$t: exit status $rc, want 1")
    grep -Fq 'incorrect data check' "out/crc$t.err" || why+=("WDS_READ_THREAD=$t: stderr lacks the CRC error")
  done
  n0=$(wc -l <out/crc0.out) n1=$(wc -l <out/crc1.out)
  cmp -s out/crc0.out out/crc1.out || why+=("samples differ: $n0 without the thread, $n1 with it")
  cmp -s out/crc0.err out/crc1.err || why+=("messages differ: '$(cat out/crc0.err)' vs '$(cat out/crc1.err)'")
  if ((held)); then
    # Held: no sample of the damaged member is handed out.
    ((n0 == 0)) || why+=("$n0 samples of the damaged member came out before its check")
    name=gzip_trailer_crc_held_same_with_and_without_thread
  else
    # Not held: the CRC is checked after the member's last byte: every sample
    # but the last (whose end the parser sees only at the end-of-archive
    # marker) comes first.
    ((n0 >= 599)) || why+=("only $n0 of 600 samples before the error at the trailer")
    name=gzip_trailer_crc_unheld_same_with_and_without_thread
  fi
  if ((${#why[@]})); then
    fail_case $name "${why[@]}"
  else
    pass_case "$name ($n0 samples, then: $(cat out/crc0.err))"
  fi
done

echo "$passed passed, $failed failed"
((failed == 0))
