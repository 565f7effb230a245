#!/usr/bin/env bash
# Fuzzes the GGUF reader: configures a separate clang build (build-fuzz/, AddressSanitizer +
# UndefinedBehaviorSanitizer + libFuzzer), builds fuzz_gguf and runs it for N seconds
# (default 60) starting from the committed seed corpus (fuzz/corpus/gguf/). New interesting
# inputs go to build-fuzz/corpus/gguf/, crash reproducers to build-fuzz/artifacts/.
# Exits nonzero when the fuzzer finds a crash, a sanitizer report, a leak or a timeout.
# More: docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}

cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
if [[ -z "$cxx" || -z "$cc" ]]; then
  echo "fuzz.sh: clang is not installed (apt-get install clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
  -DMINFER_BUILD_FUZZ=ON -DMINFER_BUILD_TESTS=OFF -DMINFER_BUILD_BENCH=OFF -DMINFER_CUDA=OFF \
  >/dev/null || exit 1
cmake --build build-fuzz --target fuzz_gguf -j"$(nproc)"

mkdir -p build-fuzz/corpus/gguf build-fuzz/artifacts
echo "fuzz.sh: running fuzz_gguf for ${seconds}s"
ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  build-fuzz/fuzz/fuzz_gguf -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -print_final_stats=1 -dict=fuzz/gguf.dict \
  -artifact_prefix=build-fuzz/artifacts/ \
  build-fuzz/corpus/gguf fuzz/corpus/gguf
