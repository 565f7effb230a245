#!/usr/bin/env bash
# Runs the libFuzzer targets: configures a separate clang build (build-fuzz/, AddressSanitizer +
# UndefinedBehaviorSanitizer + libFuzzer), builds the targets and runs each in turn.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS (default 60) is shared evenly by the targets run; TARGET... defaults to every target
# of the list below. Each target starts from its committed seeds; new interesting inputs go to
# build-fuzz/corpus/<target>/, crash reproducers to build-fuzz/artifacts/. Exits nonzero when a
# fuzzer finds a crash, a sanitizer report, a leak or a timeout, and when clang is missing.
# More: docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

# One line per target: name, seed folder(s) (colon-separated), -max_len, dictionary (- for none).
# A new target is one more line here (and its add_executable in fuzz/CMakeLists.txt).
targets_table=(
  "fuzz_gguf           fuzz/corpus/gguf             65536  fuzz/gguf.dict"
  "fuzz_model          fuzz/corpus/gguf             65536  fuzz/gguf.dict"
  "fuzz_tokenizer      tests/data/tokenizer         4096   -"
  "fuzz_chat_template  fuzz/corpus/chat_template:tests/data/chat_templates  8192  fuzz/jinja.dict"
  "fuzz_server_request fuzz/corpus/server_request   65536  -"
)

seconds=${1:-60}
shift || true
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds < 1)); then
  echo "fuzz.sh: SECONDS must be a positive integer, got '$seconds'" >&2
  exit 2
fi
declare -A row=()
all=()
for line in "${targets_table[@]}"; do
  read -r name _ <<<"$line"
  row[$name]=$line
  all+=("$name")
done
if (($#)); then wanted=("$@"); else wanted=("${all[@]}"); fi
for t in "${wanted[@]}"; do
  [[ -n "${row[$t]:-}" ]] || { echo "fuzz.sh: unknown target '$t' (known: ${all[*]})" >&2; exit 2; }
done
per_target=$((seconds / ${#wanted[@]}))
((per_target >= 1)) || per_target=1

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
cmake --build build-fuzz --target "${wanted[@]}" -j"$(nproc)"

mkdir -p build-fuzz/artifacts
failed=()
for t in "${wanted[@]}"; do
  read -r name seeds max_len dict <<<"${row[$t]}"
  mkdir -p "build-fuzz/corpus/$name"
  dict_arg=()
  [[ "$dict" != "-" ]] && dict_arg=(-dict="$dict")
  IFS=: read -r -a seed_dirs <<<"$seeds"
  echo "fuzz.sh: running $name for ${per_target}s"
  if ! ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "build-fuzz/fuzz/$name" -max_total_time="$per_target" -timeout=10 -rss_limit_mb=2048 \
    -max_len="$max_len" -print_final_stats=1 "${dict_arg[@]}" \
    -artifact_prefix="build-fuzz/artifacts/$name-" \
    "build-fuzz/corpus/$name" "${seed_dirs[@]}"; then
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: FINDINGS in: ${failed[*]} (reproducers in build-fuzz/artifacts/)" >&2
  exit 1
fi
echo "fuzz.sh: ${#wanted[@]} targets, ${per_target}s each, no findings"
