#!/usr/bin/env bash
# The main job: installs what is missing (Debian 12), builds minfer, and generates Python code
# with the bundled demo model (a 45M-parameter Qwen2 model trained for this project).
# Extra arguments go to `minfer run` (e.g. -p "class Stack:" -n 64 --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
# The CUDA backend is built only when a GPU is visible (nvidia-smi lists one): compiling it for a
# machine that cannot run it takes most of the build time (nvcc alone, about 9 of 12 minutes on 2
# cores). A build by hand with -DMINFER_CUDA=ON always builds it (README).
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then cuda=AUTO; fi
[[ $cuda == OFF ]] && echo "setup_and_run: no NVIDIA GPU visible: building minfer for the CPU only" >&2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DMINFER_CUDA="$cuda" -DMINFER_BUILD_TESTS=OFF \
  -DMINFER_BUILD_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target minfer
model=models/minfer-demo-py-q6_K.gguf
if [[ $# -eq 0 ]]; then
  set -- -p $'def fibonacci(n):\n' -n 96 --temp 0 --repeat-penalty 1.2  # greedy, without the loops a 45M model falls into
fi
exec build/tools/minfer/minfer run -m "$model" "$@"
