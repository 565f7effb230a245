#!/usr/bin/env bash
# KV session save/restore speed: a synth model, a prompt of about N_TOKENS tokens (this
# repository's C++ sources), then `minfer run --prompt-cache` twice: the first run prefills and
# saves, the second restores, prefills the last token and saves again. Each save and restore
# prints one line "minfer: prompt cache: saved|restored N tokens, B bytes, T ms (G GB/s): FILE".
#
#   scripts/session_bench.sh VOCAB.gguf [arch:preset:type] [N_TOKENS]
#   e.g. scripts/session_bench.sh models/minfer-demo-py-q6_K.gguf qwen2:qwen2.5-7b:q4_K_M 8192
# Environment: DEVICE (cuda or cpu, default cuda), CACHE_TYPE (default f16), MODELS_DIR (default
# /tmp/minfer-models), SESSION_DIR (where the session file goes, default /tmp/minfer-session).
set -euo pipefail
cd "$(dirname "$0")/.."
[[ ! -d .device && -f .device.tar.xz ]] && tar -xJf .device.tar.xz
vocab=$1 spec=${2:-qwen2:qwen2.5-7b:q4_K_M} n_tokens=${3:-8192}
bin=.device/bin
[[ -x $bin/minfer ]] || bin=build-cuda/tools/minfer
[[ -x $bin/minfer ]] || bin=build/tools/minfer
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
models_dir=${MODELS_DIR:-/tmp/minfer-models} work=${SESSION_DIR:-/tmp/minfer-session}
mkdir -p "$models_dir" "$work"
IFS=: read -r arch preset type <<<"$spec"
model="$models_dir/$preset-$type.gguf"
[[ -f $model ]] || "$bin/minfer" synth --arch "$arch" --preset "$preset" --type "$type" --seed 1 --vocab "$vocab" \
  --distinct-rows 64 -o "$model"
# The prompt: sources until the tokenizer counts n_tokens - 16 (room for the reply).
prompt="$work/prompt.txt"
cat src/*/*.cpp src/*/*.h > "$work/all.txt"
bytes=$((n_tokens * 3))
while :; do
  head -c "$bytes" "$work/all.txt" > "$prompt"
  n=$("$bin/minfer" tokenize -m "$model" --ids < "$prompt" 2>/dev/null | wc -w)
  ((n >= n_tokens - 16 || bytes >= $(stat -c %s "$work/all.txt"))) && break
  bytes=$((bytes * (n_tokens - 16) / n + 64))
done
head -c $((bytes * (n_tokens - 16) / n)) "$work/all.txt" > "$prompt"
echo "prompt: $("$bin/minfer" tokenize -m "$model" --ids < "$prompt" 2>/dev/null | wc -w) tokens"
rm -f "$work/session.bin"
for run in first second; do
  echo "== $run run"
  /usr/bin/time -f "wall %e s" "$bin/minfer" run -m "$model" --device "${DEVICE:-cuda}" --cache-type "${CACHE_TYPE:-f16}" \
    -c $((n_tokens + 64)) -f "$prompt" -n 1 --temp 0 --no-display-prompt --prompt-cache "$work/session.bin" 2>&1 >/dev/null |
    grep -E "prompt cache|minfer: prompt|wall|error|warning"
done
