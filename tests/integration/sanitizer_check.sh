#!/usr/bin/env bash
# Tool test: scripts/sanitizer-check.py, the judge of compute-sanitizer's
# logs in scripts/gpu-run.sh, on logs written as the tool writes them (no
# GPU needed): a clean run passes; a leak from our code fails, naming its
# frame; NCCL's own leaks (symbolized or not), NCCL's kernel-image probe
# errors and cudaErrorNotReady (the answer of a poll) are counted, not
# failed; an invalid access or a race hazard in our kernel fails; a log
# without its summary (the tool or the test died) fails. And
# tests/gpu/compute-sanitizer.supp.xml is well-formed XML of the tool's
# output format.
# Usage: sanitizer_check.sh SRC_DIR PYTHON3
set -euo pipefail
SRC=$1 PY=$2
CHECK=$SRC/scripts/sanitizer-check.py
passed=0
failed=0
ok() { echo "ok $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1${2:+: $2}"; failed=$((failed + 1)); }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/wds-sanitizer.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
cd "$TMP"

# expect NAME RC PATTERN: sanitizer-check.py on NAME.log exits RC, prints PATTERN.
expect() {
  local name=$1 want=$2 pat=$3 rc=0
  "$PY" "$CHECK" "$name.log" >"$name.out" 2>&1 || rc=$?
  if ((rc == want)) && grep -q -- "$pat" "$name.out"; then
    ok "$name: $(head -1 "$name.out")"
  else
    bad "$name" "rc $rc (want $want): $(cat "$name.out")"
  fi
}

cat >clean.log <<'LOG'
========= COMPUTE-SANITIZER
ok   cuda_matches_cpu_fp32
7 passed, 0 failed
========= LEAK SUMMARY: 0 bytes leaked in 0 allocations
========= ERROR SUMMARY: 0 errors
LOG
expect clean 0 "^PASS ours: 0 errors, 0 leaks"

probe='========= Program hit cudaErrorNoKernelImageForDevice (error 209) due to "no kernel image is available for execution on the device" on CUDA API call to cudaFuncGetAttributes.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: [0x4d1c3f] in libcuda.so.1
=========         Host Frame: cudaFuncGetAttributes [0x1b2f4e] in libnccl.so.2
=========         Host Frame: ncclInitKernelsForDevice(int, unsigned long*) [0x8e21a] in libnccl.so.2
=========         Host Frame: ncclCommInitRankConfig [0x9a1b0] in libnccl.so.2
=========         Host Frame: rank_init(tr_rank*, wds__err*) in /src/trainer/backend_cuda.cu:650 [0x3c1f2] in test_trainer_gpu
========='
ncclleak='========= Leaked 2097152 bytes at 0x7f1e2a000000
=========     Saved host backtrace up to driver entry point at allocation time
=========         Host Frame: [0x2e7d11] in libcuda.so.1
=========         Host Frame: [0x1a2b3c] in libnccl.so.2
=========         Host Frame: ncclCommInitRankConfig [0x9a1b0] in libnccl.so.2
=========         Host Frame: rank_init(tr_rank*, wds__err*) [0x3c1f2] in test_trainer_gpu
=========
========= Leaked 4096 bytes at 0x7f1e2b000000
=========     Saved host backtrace up to driver entry point at allocation time
=========         Host Frame: cuMemAlloc_v2 [0x2e7d11] in libcuda.so.1
=========         Host Frame: cudaMalloc [0x1b2f4e] in libnccl.so.2
=========         Host Frame: ncclCudaCalloc(void**, unsigned long) [0x5e21a] in libnccl.so.2
=========         Host Frame: cuda_rank_create in /src/trainer/backend_cuda.cu:700 [0x3c1f2] in test_trainer_gpu
========='
ourleak='========= Leaked 1048576 bytes at 0x7f1e2c000000
=========     Saved host backtrace up to driver entry point at allocation time
=========         Host Frame: [0x2e7d11] in libcuda.so.1
=========         Host Frame: cudaMalloc [0x66a21] in test_trainer_gpu
=========         Host Frame: rank_init(tr_rank*, wds__err*) in /src/trainer/backend_cuda.cu:612 [0x3c1f2] in test_trainer_gpu
=========         Host Frame: cuda_rank_create in /src/trainer/backend_cuda.cu:700 [0x3c2a0] in test_trainer_gpu
========='
{
  echo "========= COMPUTE-SANITIZER"
  echo "$probe"
  echo "$probe"
  echo "$ncclleak"
  echo "========= LEAK SUMMARY: 2101248 bytes leaked in 2 allocations"
  echo "========= ERROR SUMMARY: 4 errors"
} >nccl.log
expect nccl 0 "^PASS ours: 0 errors, 0 leaks (0 bytes); nccl: 0 errors, 2 leaks (2101248 bytes).*probe errors: 2$"

{
  echo "========= COMPUTE-SANITIZER"
  echo "$ncclleak"
  echo "$ourleak"
  echo "========= LEAK SUMMARY: 3149824 bytes leaked in 3 allocations"
  echo "========= ERROR SUMMARY: 3 errors"
} >ourleak.log
expect ourleak 1 "ours: Leaked 1048576 bytes .*rank_init"

cat >access.log <<'LOG'
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at k_bias_act(float *, const float *, unsigned long, int, int)+0x1d0 in /src/trainer/backend_cuda.cu:300
=========     by thread (64,0,0) in block (2,0,0)
=========     Address 0x7f1e2c000400 is out of bounds
=========
========= ERROR SUMMARY: 1 error
LOG
expect access 1 "^FAIL ours: 1 errors"

cat >race.log <<'LOG'
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at k_sum_rows(const float *, const float *, const float *, int, double *, int, float *)+0x300 in /src/trainer/backend_cuda.cu:330
=========     and Read access at k_sum_rows(const float *, const float *, const float *, int, double *, int, float *)+0x340 in /src/trainer/backend_cuda.cu:331 [8 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
LOG
expect race 1 "^FAIL ours: 1 errors"

cat >ncclrace.log <<'LOG'
========= COMPUTE-SANITIZER
========= Warning: Race reported between Write access at ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)+0x1c0
=========     and Read access at ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096>)+0x200 [4 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (0 errors, 1 warning)
LOG
expect ncclrace 0 "nccl: 1 errors"

cat >notready.log <<'LOG'
========= COMPUTE-SANITIZER
========= Program hit cudaErrorNotReady (error 600) due to "device not ready" on CUDA API call to cudaEventQuery.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: cudaEventQuery [0x1c2d3] in test_trainer_gpu
=========         Host Frame: wait_event(tr_rank*, CUevent_st*, char const*, wds__err*) [0x3a1b2] in test_trainer_gpu
=========
========= ERROR SUMMARY: 1 error
LOG
expect notready 0 "^PASS ours: 0 errors.*cudaErrorNotReady polls: 1$"

cat >died.log <<'LOG'
========= COMPUTE-SANITIZER
ok   cuda_matches_cpu_fp32
LOG
expect died 1 "no summary line"

if "$PY" -c 'import sys, xml.etree.ElementTree as E
r = E.parse(sys.argv[1]).getroot()
assert r.tag == "ComputeSanitizerOutput", r.tag
recs = r.findall("record")
assert recs and all(x.findtext("kind") for x in recs)
assert any(f.findtext("function") == "ncclInitKernelsForDevice" for f in r.iter("frame"))' \
  "$SRC/tests/gpu/compute-sanitizer.supp.xml" 2>err.txt; then
  ok "the suppression file: the tool's XML, NCCL's probe only"
else
  bad "the suppression file" "$(cat err.txt)"
fi

echo "$passed passed, $failed failed"
((failed == 0))
