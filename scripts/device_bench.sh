#!/usr/bin/env bash
# GPU benchmark session (run on the device machine from the bundle made by device_bundle.sh):
# makes real-shape models with `minfer synth` (seeded weights, the Qwen tokenizer from --vocab),
# then runs `minfer bench --device cuda` on each and, when LLAMA_BENCH points at a llama-bench
# built beside it, llama.cpp on the same file, interleaved A B A B so both see the same machine.
#
#   scripts/device_bench.sh VOCAB.gguf OUTDIR "qwen2:qwen2.5-0.5b:q4_K_M qwen2:qwen2.5-7b:q8_0" \
#       [minfer bench options...]
# Environment: DEVICE (cuda or cpu, default cuda), LLAMA_BENCH=path/to/llama-bench (optional), ROUNDS (A/B rounds, default 1),
#              MODELS_DIR (default /tmp/minfer-models).
set -uo pipefail
cd "$(dirname "$0")/.."
[[ ! -d .device && -f .device.tar.xz ]] && tar -xJf .device.tar.xz
vocab=$1 out=$2 specs=$3  # vocab: any GGUF with tokenizer.* keys (e.g. models/minfer-demo-py-q6_K.gguf)
shift 3
bench_opts=("$@")
[[ ${#bench_opts[@]} -eq 0 ]] && bench_opts=(-p 512 -n 128 -r 5)
models_dir=${MODELS_DIR:-/tmp/minfer-models}
rounds=${ROUNDS:-1}
mkdir -p "$models_dir" "$out"
bin=.device/bin
[[ -x $bin/minfer ]] || bin=build-cuda/tools/minfer
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
rm -f "$out/.last.jsonl"
for spec in $specs; do
  IFS=: read -r arch preset type <<<"$spec"
  f="$models_dir/$preset-$type.gguf"
  if [[ ! -f $f ]]; then
    /usr/bin/time -f "synth $preset $type: %e s, %M KB" "$bin/minfer" synth --arch "$arch" --preset "$preset" \
      --type "$type" --seed 1 --vocab "$vocab" -o "$f" 2>&1 | tail -2
  fi
  for ((r = 1; r <= rounds; r++)); do
    echo "== $preset $type round $r: minfer"
    "$bin/minfer" bench -m "$f" --device "${DEVICE:-cuda}" -o jsonl "${bench_opts[@]}" > "$out/.last.jsonl"
    cat "$out/.last.jsonl" >> "$out/minfer.jsonl"
    python3 scripts/bench_summary.py "$out/.last.jsonl"
    if [[ -n ${LLAMA_BENCH:-} ]]; then
      echo "== $preset $type round $r: llama.cpp"
      "$LLAMA_BENCH" -m "$f" -ngl 99 -fa 1 "${bench_opts[@]}" -o jsonl > "$out/.last.jsonl" 2>/dev/null
      cat "$out/.last.jsonl" >> "$out/llama.jsonl"
      python3 scripts/bench_summary.py "$out/.last.jsonl"
    fi
  done
done
