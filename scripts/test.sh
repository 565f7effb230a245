#!/usr/bin/env bash
# The test command: installs what is missing, builds everything (the CUDA code too when nvcc is
# present; it cannot run without a GPU, and device tests skip), runs the GoogleTest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
jobs=$(nproc)
# Tests, benchmarks and CUDA detection (AUTO: the CUDA code when nvcc is present) explicitly: the
# set-up command configures the same build/ without tests and benchmarks, and with MINFER_CUDA=OFF
# on a machine without a GPU, and CMake would keep those cached values.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_WERROR=ON -DMINFER_BUILD_TESTS=ON \
  -DMINFER_BUILD_BENCH=ON -DMINFER_CUDA=AUTO
cmake --build build -j"$jobs"
# --no-tests=error: a build that produced no tests is a failure, never an empty success.
ctest --test-dir build --output-on-failure --no-tests=error -j"$jobs"

# End to end: `minfer serve` on a loopback port driven by the official OpenAI Node client
# (tests/server/e2e.mjs; npm `openai` pinned by tests/server/package-lock.json). Prints
# "N passed, M failed" and fails the script on any failure.
if ! build/tools/minfer/minfer serve -m /nonexistent.gguf --port 0 2>&1 | grep -q 'built without the server'; then
  command -v node >/dev/null 2>&1 || { echo "test.sh: node (20+) is needed for the server tests" >&2; exit 1; }
  (cd tests/server && npm ci --no-audit --no-fund --loglevel=error)
  timeout 1800 node tests/server/e2e.mjs --bin build/tools/minfer/minfer
fi

# Fuzz the GGUF reader for a minute when clang is installed (docs/fuzzing.md); a finding fails
# the script.
if command -v clang++-14 >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1; then
  scripts/fuzz.sh 60
fi
