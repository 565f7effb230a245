#!/usr/bin/env bash
# Runs the device tests: the CUDA suites (tests/cuda/: per-op parity, backend mechanics, CUDA
# Graph capture/replay, engine identity against the CPU) and the weight-placement rule, serially
# in one process (the CUDA context is process-wide), then prints a summary.
#
# Two ways to get the binaries:
#   bundle  .device/bin/minfer_tests made by scripts/device_bundle.sh (used when present): the
#           way to run on the device machine, which cannot build (no -dev packages there)
#   build   builds build-cuda here first (a machine with the build dependencies)
# Options: --build (force build mode), --filter PATTERN (gtest filter), anything else is passed
# to minfer_tests. When $OUT is set (the device tool), the log is also written to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ ! -d .device && -f .device.tar.xz ]] && tar -xJf .device.tar.xz
root=$PWD
mode=auto
filter='Cuda*:*/Cuda*:WeightPlacement.*'
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) mode=build ;;
    --filter) filter=$2; shift ;;
    *) extra+=("$1") ;;
  esac
  shift
done

if [[ $mode == auto && -x "$root/.device/bin/minfer_tests" ]]; then
  mode=bundle
fi
if [[ $mode == bundle ]]; then
  tests="$root/.device/bin/minfer_tests"
  export LD_LIBRARY_PATH="$root/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
else
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_CUDA=ON \
    -DMINFER_CUDA_ARCHS="${MINFER_CUDA_ARCHS:-90a}" -DMINFER_WERROR=ON >/dev/null || exit 1
  ninja -C build-cuda -j"${JOBS:-$(nproc)}" minfer minfer_tests || exit 1
  tests="$root/build-cuda/tests/minfer_tests"
fi
# Fixtures: ../shared beside the checkout, or shared/ inside it (the device tool's copy).
if [[ -z "${MINFER_SHARED_DIR:-}" && -d "$root/shared" ]]; then export MINFER_SHARED_DIR="$root/shared"; fi

log=$(mktemp)
echo "cuda_test: $mode mode, $tests"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$tests" --gtest_filter="$filter" --gtest_color=no "${extra[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
[[ -n "${OUT:-}" && -d "${OUT:-}" ]] && cp "$log" "$OUT/cuda_test.log"

echo
echo "==== cuda_test summary ($mode mode, filter $filter) ===="
grep -E '^\[ +(greedy|engine|rope) +\]' "$log" || true
# gtest's totals, the failed tests by name, the number skipped (the log says why).
grep -E '^\[==========\] .* ran\.|^\[  PASSED  \]' "$log"
grep -E '^\[  SKIPPED \] [0-9]+ tests?,' "$log" || true
sed -n '/^\[  FAILED  \] [0-9]* tests\?, listed below/,$p' "$log"
echo "exit status: $rc"
rm -f "$log"
exit "$rc"
