#!/usr/bin/env bash
# The main job: installs what is missing (Debian 12), builds minfer, and generates Python code
# with the bundled demo model (a 45M-parameter Qwen2 model trained for this project).
# Extra arguments go to `minfer run` (e.g. -p "class Stack:" -n 64 --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_BUILD_TESTS=OFF -DMINFER_BUILD_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target minfer
model=models/minfer-demo-py-q6_K.gguf
if [[ $# -eq 0 ]]; then
  set -- -p $'def fibonacci(n):\n' -n 96 --temp 0 --repeat-penalty 1.2  # greedy, without the loops a 45M model falls into
fi
exec build/tools/minfer/minfer run -m "$model" "$@"
