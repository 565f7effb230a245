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
