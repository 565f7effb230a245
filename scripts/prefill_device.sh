#!/usr/bin/env bash
# The prefill campaign's device run (issue 7), one command on the device machine after
# scripts/device_bundle.sh here:
#   1. every device test suite (scripts/cuda_test.sh: MMQ parity and emulation identity, matmul,
#      graphs, engine identity CPU vs CUDA), log in $OUT/cuda_test.log;
#   2. the MMQ micro-benchmark: the mma.sync int8 probe, then TOPS per type x model shape at
#      n = 512 and 2048 beside the previous f32 GEMM ($OUT/bench_mmq.log);
#   3. MMVQ vs MMQ per call at n = 1..16 on the 7B ffn shapes, to place kMmqMinTokens
#      ($OUT/mmq_crossover.log).
# Usage: scripts/prefill_device.sh          (OUT defaults to /tmp/prefill-device)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/prefill-device}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
bin=.device/bin
[[ -x $bin/bench_cuda_mmq ]] || bin=build-cuda/bench
OUT=$out scripts/cuda_test.sh
rc=$?
"$bin/bench_cuda_mmq" --gemm --type all 2>&1 | tee "$out/bench_mmq.log"
"$bin/bench_cuda_mmq" --crossover --type q4_K --iters 10 2>&1 | tee "$out/mmq_crossover.log"
"$bin/bench_cuda_mmq" --crossover --type q4_0 --iters 10 2>&1 | tee -a "$out/mmq_crossover.log"
echo "prefill_device: tests exit status $rc; logs in $out"
exit "$rc"
