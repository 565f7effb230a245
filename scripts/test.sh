#!/usr/bin/env bash
# The test command: installs what is missing, builds everything (the CUDA code too when nvcc is
# present; it cannot run without a GPU, and device tests skip), runs the GoogleTest suite, then
# every fuzz target for a bounded time (scripts/fuzz.sh, about 3 minutes in all).
#
# Under CI (CI=true or CI=1, as CI services set it) nothing may pass by being absent: a test
# whose ../shared reference data is missing fails instead of skipping (tests/test_util.h), and a
# missing clang fails the fuzzing step. Elsewhere both are skipped, and the last lines say how
# many tests were skipped and why.
set -euo pipefail
cd "$(dirname "$0")/.."
# No step reads the caller's standard input: a CI runner may hand over a pipe that never closes,
# and a test that read it would wait forever.
exec </dev/null
# Each step's wall time and the CPU time of its processes, so a slow CI run says where it went.
TIMEFORMAT='test.sh: %R s wall, %U s user, %S s system'
step() { echo "test.sh: == $1"; }
step "dependencies"
time scripts/install_deps.sh
jobs=$(nproc)
ci=false
[[ "${CI:-}" == "true" || "${CI:-}" == "1" ]] && ci=true
# Tests, benchmarks and CUDA detection (AUTO: the CUDA code when nvcc is present) explicitly: the
# set-up command configures the same build/ without tests and benchmarks, and with MINFER_CUDA=OFF
# on a machine without a GPU, and CMake would keep those cached values.
step "build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_WERROR=ON -DMINFER_BUILD_TESTS=ON \
  -DMINFER_BUILD_BENCH=ON -DMINFER_CUDA=AUTO
time cmake --build build -j"$jobs"

# --no-tests=error: a build that produced no tests is a failure, never an empty success.
# Each failing step is named again at the very end: a CI service may keep only the last lines.
status=0
failures=()
step "ctest"
time ctest --test-dir build --output-on-failure --no-tests=error -j"$jobs" 2>&1 | tee build/ctest-output.txt ||
  { status=1; failures+=("ctest"); }

# End to end: `minfer serve` on a loopback port driven by the official OpenAI Node client
# (tests/server/e2e.mjs; npm `openai` pinned by tests/server/package-lock.json). Prints
# "N passed, M failed"; a failure fails the run.
if ! timeout -s KILL 30 build/tools/minfer/minfer serve -m /nonexistent.gguf --port 0 2>&1 | grep -q 'built without the server'; then
  command -v node >/dev/null 2>&1 || { echo "test.sh: node (20+) is needed for the server tests" >&2; exit 1; }
  step "server end to end"
  time (cd tests/server && timeout 600 npm ci --no-audit --no-fund --loglevel=error)
  time timeout 900 node tests/server/e2e.mjs --bin build/tools/minfer/minfer 2>&1 | tee build/e2e-output.txt ||
    { status=1; failures+=("server end to end"); }
elif $ci; then
  echo "test.sh: minfer was built without the server (libcpp-httplib-dev missing); under CI that fails" >&2
  status=1
  failures+=("server end to end (not built)")
fi

# Every fuzz target (scripts/fuzz.sh's list), 180 s shared among them; a finding fails the run.
fuzz_note=""
if $ci || command -v clang++-14 >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1; then
  step "fuzzing"
  time scripts/fuzz.sh 180 2>&1 | tee build/fuzz-output.txt || { status=1; failures+=("fuzzing"); }
else
  fuzz_note="fuzzing skipped: clang is not installed (scripts/install_deps.sh installs clang-14)"
fi

# The skipped tests, counted by reason: every skip for missing reference data says
# MINFER_SHARED_ABSENT (tests/test_util.h), every device test without a GPU "CUDA device".
log=build/Testing/Temporary/LastTest.log
skipped=$(grep -c '(Skipped)$' build/ctest-output.txt || true)
if ((skipped > 0)) || [[ -n "$fuzz_note" ]]; then
  shared=$(grep -c '\.\./shared reference data absent' "$log" || true)
  gpu=$(grep -c 'no CUDA device\|no usable CUDA device' "$log" || true)
  other=$((skipped - shared - gpu))
  echo "=== skipped ==="
  ((shared > 0)) && echo "$shared tests skipped: ../shared reference data absent (set MINFER_SHARED_DIR to the shared/ folder; under CI=true they fail)"
  ((gpu > 0)) && echo "$gpu tests skipped: no GPU (device tests in tests/cuda)"
  ((other > 0)) && echo "$other tests skipped for other reasons (see $log)"
  [[ -n "$fuzz_note" ]] && echo "$fuzz_note"
fi
if ((${#failures[@]})); then
  echo "=== failed ==="
  for f in "${failures[@]}"; do
    case "$f" in
      ctest) sed -n '/tests passed, .* tests failed out of/,$p' build/ctest-output.txt | grep -v '^Total Test time' ||
        echo "ctest: no summary line (see build/ctest-output.txt)" ;;
      "server end to end") grep -E '^(FAIL |[0-9]+ passed, )' build/e2e-output.txt | cut -c1-400 || echo "server end to end: no summary line (timed out or crashed)" ;;
      fuzzing) grep -E 'FINDINGS|^==[0-9]+==ERROR|^SUMMARY' build/fuzz-output.txt | head -20 || true ;;
      *) echo "$f" ;;
    esac
  done
fi
# The machine, for runs that pass here and fail there (the CPU's SIMD level picks the kernels).
cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | xargs || true)
simd=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | grep -ow 'avx2\|avx512f\|avx512_vnni' | sort -u | xargs || true)
echo "test.sh: machine: $(nproc) cores, ${cpu:-unknown CPU}, ${simd:-no AVX2}; user $(id -un)"
echo "test.sh: all steps took ${SECONDS} s"
exit "$status"
