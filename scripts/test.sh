#!/usr/bin/env bash
# The test command: installs what is missing, builds everything (the CUDA code too when nvcc is
# present; it cannot run without a GPU, and device tests skip), runs the GoogleTest suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_WERROR=ON
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"

# Fuzz the GGUF reader for a minute when clang is installed (docs/fuzzing.md); a finding fails
# the script.
if command -v clang++-14 >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1; then
  scripts/fuzz.sh 60
fi
