#!/usr/bin/env bash
# The prefill campaign's device run (issue 7, batch 2: flash-attention prefill), one command on
# the device machine after scripts/device_bundle.sh here (carry .device or .device.tar.xz).
# Builds nothing. Each step has a time limit so that the whole run stays under the device
# tool's 10 minutes per command:
#   1. the flash-attention prefill tests and the attention / KV suites that now route prefill
#      shapes through it                                        $OUT/cuda_test_flash.log (<= 150 s)
#   2. the MMQ device tests (they did not run in device call 1)  $OUT/cuda_test_mmq.log   (<= 180 s)
#   3. 1.5B Q4_K_M: minfer bench pp512 and pp2048 (3 runs), the same with MINFER_CUDA_NO_FLASH_ATTN=1
#      (A/B in one session), and a MINFER_CUDA_PROFILE=1 prefill profile
#      (per-op device times; Attn was 1284 us per call before)  $OUT/bench_1.5b.log       (<= 160 s)
#   4. every other device test suite (engine identity CPU vs CUDA prefills through the flash
#      kernel now) with the time left                           $OUT/cuda_test_rest.log
# Usage: scripts/prefill_device.sh          (OUT defaults to /tmp/prefill-device)
set -uo pipefail
cd "$(dirname "$0")/.."
[[ ! -d .device && -f .device.tar.xz ]] && tar -xJf .device.tar.xz
out=${OUT:-/tmp/prefill-device}
mkdir -p "$out"
start=$SECONDS
bin=.device/bin
[[ -x $bin/minfer ]] || bin=build-cuda/tools/minfer
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# cuda_test.sh copies its log to $OUT/cuda_test.log when OUT is set: run it without OUT and keep
# each log under its own name.
OUT= timeout 150 scripts/cuda_test.sh --filter '*CudaFlashAttn*:*CudaKv*' 2>&1 | tee "$out/cuda_test_flash.log"
rc_flash=${PIPESTATUS[0]}
OUT= timeout 180 scripts/cuda_test.sh --filter '*CudaMmq*' 2>&1 | tee "$out/cuda_test_mmq.log" |
  grep -E '^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|^exit status'
rc_mmq=${PIPESTATUS[0]}
{
  m=/tmp/minfer-models/qwen2.5-1.5b-q4_K_M.gguf
  mkdir -p /tmp/minfer-models
  [[ -f $m ]] || timeout 60 "$bin/minfer" synth --arch qwen2 --preset qwen2.5-1.5b --type q4_K_M --seed 1 \
    --vocab models/minfer-demo-py-q6_K.gguf -o "$m" 2>&1 | tail -2
  timeout 30 "$bin/minfer" bench -m "$m" --device cuda -p 512,2048 -n 32 -r 3
  echo "== the same with MINFER_CUDA_NO_FLASH_ATTN=1 (the split-K attention of batch 1)"
  MINFER_CUDA_NO_FLASH_ATTN=1 timeout 40 "$bin/minfer" bench -m "$m" --device cuda -p 512,2048 -n 32 -r 3
  MINFER_CUDA_PROFILE=1 timeout 30 "$bin/minfer" bench -m "$m" --device cuda -p 512 -n 1 -r 1
} > "$out/bench_1.5b.log" 2>&1
tail -40 "$out/bench_1.5b.log"
left=$((585 - (SECONDS - start)))
rc_rest=124
if ((left > 30)); then
  OUT= timeout "$left" scripts/cuda_test.sh --filter 'Cuda*:*/Cuda*:WeightPlacement.*-*CudaMmq*:*CudaFlashAttn*:*CudaKv*' 2>&1 |
    tee "$out/cuda_test_rest.log" | grep -E '^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|^\[ +(greedy|engine|rope) +\]|^exit status'
  rc_rest=${PIPESTATUS[0]}
fi
echo "prefill_device: flash tests exit status $rc_flash, MMQ tests $rc_mmq, other device tests $rc_rest" \
  "(124: time limit); $((SECONDS - start)) s; logs in $out"
((rc_flash == 0 && rc_mmq == 0 && rc_rest == 0))
