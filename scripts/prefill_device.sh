#!/usr/bin/env bash
# The prefill campaign's device run (issue 7), one command on the device machine after
# scripts/device_bundle.sh here (carry .device or .device.tar.xz). Builds nothing. Each step has
# a time limit so that the whole run stays under the device tool's 10 minutes per command:
#   1. the MMQ device tests (parity with the CPU, bit-identity with the host emulation, awkward
#      shapes, routing, launch-failure site)                      $OUT/cuda_test_mmq.log  (<= 240 s)
#   2. the MMQ micro-benchmark: the mma.sync int8 probe, then TOPS per type x model shape at
#      n = 512 and 2048 beside the previous f32 GEMM                 $OUT/bench_mmq.log      (<= 150 s)
#   3. MMVQ vs MMQ per call at n = 1..16 on the 7B ffn shapes, to place kMmqMinTokens
#                                                                   $OUT/mmq_crossover.log  (<= 50 s)
#   4. every other device test suite (matmul, graphs, engine identity CPU vs CUDA, which now
#      prefills through MMQ) with the time left                   $OUT/cuda_test_rest.log
# Usage: scripts/prefill_device.sh          (OUT defaults to /tmp/prefill-device)
set -uo pipefail
cd "$(dirname "$0")/.."
[[ ! -d .device && -f .device.tar.xz ]] && tar -xJf .device.tar.xz
out=${OUT:-/tmp/prefill-device}
mkdir -p "$out"
start=$SECONDS
bin=.device/bin
[[ -x $bin/bench_cuda_mmq ]] || bin=build-cuda/bench
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# cuda_test.sh copies its log to $OUT/cuda_test.log when OUT is set: run it without OUT and keep
# each log under its own name.
OUT= timeout 240 scripts/cuda_test.sh --filter '*CudaMmq*' 2>&1 | tee "$out/cuda_test_mmq.log"
rc_mmq=${PIPESTATUS[0]}
timeout 150 "$bin/bench_cuda_mmq" --gemm 2>&1 | tee "$out/bench_mmq.log"
{ timeout 25 "$bin/bench_cuda_mmq" --crossover --type q4_K --iters 10
  timeout 25 "$bin/bench_cuda_mmq" --crossover --type q4_0 --iters 10; } 2>&1 | tee "$out/mmq_crossover.log"
left=$((585 - (SECONDS - start)))
rc_rest=124
if ((left > 30)); then
  OUT= timeout "$left" scripts/cuda_test.sh --filter 'Cuda*:*/Cuda*:WeightPlacement.*-*CudaMmq*' 2>&1 |
    tee "$out/cuda_test_rest.log" | grep -E '^\[  (FAILED|PASSED|SKIPPED) |^\[==========\]|^\[ +(greedy|engine|rope) +\]|^exit status'
  rc_rest=${PIPESTATUS[0]}
fi
echo "prefill_device: MMQ tests exit status $rc_mmq, other device tests $rc_rest (124: time limit);" \
  "$((SECONDS - start)) s; logs in $out"
((rc_mmq == 0 && rc_rest == 0))
