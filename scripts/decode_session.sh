#!/usr/bin/env bash
# Decode-speed session on the device machine, from the bundle of scripts/device_bundle.sh (builds
# nothing). Stages (default: all, in this order):
#   tests    the device suites of the decode path (attention, fused matmuls, fusion, rope+store,
#            KV, engine identity) with a compact summary
#   profile  MINFER_CUDA_PROFILE=1 per-op device times of a 64-token decode on 1.5B Q4_K_M
#            (direct launches: absolute times include launch gaps)
#   bench    tg128 (-p 0 -n 128 -r 3) on the ANCHORS.md rows through scripts/device_bench.sh
#   sweep    decode attention ranges (MINFER_CUDA_ATTN_CHUNK) at 4096 cells of context on 7B
#
#   scripts/decode_session.sh VOCAB.gguf OUTDIR [stage...]
# Models go to MODELS_DIR (default /tmp/minfer-models), made by `minfer synth` when missing.
set -uo pipefail
cd "$(dirname "$0")/.."
vocab=${1:?usage: decode_session.sh VOCAB.gguf OUTDIR [tests|profile|bench|sweep ...]}
out=${2:?usage: decode_session.sh VOCAB.gguf OUTDIR [stage...]}
shift 2
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(tests profile bench sweep)
models=${MODELS_DIR:-/tmp/minfer-models}
bin=.device/bin
[[ -x $bin/minfer ]] || { echo "decode_session: no $bin/minfer (run scripts/device_bundle.sh here first)" >&2; exit 1; }
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MODELS_DIR=$models
mkdir -p "$out" "$models"

model() {  # arch preset type -> path (made when missing)
  local f="$models/$2-$3.gguf"
  [[ -f $f ]] || "$bin/minfer" synth --arch "$1" --preset "$2" --type "$3" --seed 1 --vocab "$vocab" -o "$f" >/dev/null 2>&1 \
    || { echo "decode_session: synth $2 $3 failed" >&2; return 1; }
  echo "$f"
}

for stage in "${stages[@]}"; do
  case $stage in
    tests)
      echo "==== tests"
      [[ -z "${MINFER_SHARED_DIR:-}" && -d shared ]] && export MINFER_SHARED_DIR=$PWD/shared
      "$bin/minfer_tests" --gtest_color=no --gtest_brief=1 \
        --gtest_filter='*CudaAttnDecode*:*CudaMatmulFused*:*CudaNormQuantize*:*CudaFusion*:*CudaRopeStore*:*CudaKv*:CudaEngine*:*CudaSynthModel*:*CudaFixtureModel*:CudaGraphs*' \
        2>&1 | tee "$out/decode_tests.log" | grep -E '^\[  FAILED|^\[  PASSED|^\[==========\]|Failure|Expected|Which is|got |differ' | head -80
      ;;
    profile)
      echo "==== profile: 1.5B Q4_K_M, 64 decode tokens, direct launches"
      f=$(model qwen2 qwen2.5-1.5b q4_K_M) || continue
      MINFER_CUDA_PROFILE=1 "$bin/minfer" bench -m "$f" --device cuda -p 0 -n 64 -r 1 -o md 2>&1 | tee "$out/profile_1.5b.txt"
      ;;
    bench)
      echo "==== bench: tg128"
      scripts/device_bench.sh "$vocab" "$out/bench" \
        "qwen2:qwen2.5-0.5b:q4_K_M qwen2:qwen2.5-1.5b:q4_K_M qwen2:qwen2.5-7b:q4_K_M qwen2:qwen2.5-7b:q8_0 qwen2:qwen2.5-7b:q4_0 qwen3:qwen3-8b:q4_K_M" \
        -p 0 -n 128 -r 3
      ;;
    sweep)
      echo "==== sweep: decode attention ranges, 7B Q4_K_M, tg32 after 4096 tokens of context"
      f=$(model qwen2 qwen2.5-7b q4_K_M) || continue
      for chunk in 0 32 64 128 256; do
        printf 'MINFER_CUDA_ATTN_CHUNK=%-4s ' "$chunk"
        MINFER_CUDA_ATTN_CHUNK=$chunk "$bin/minfer" bench -m "$f" --device cuda -p 0 -n 32 -d 4096 -r 2 -o jsonl \
          | python3 -c 'import json,sys; [print(f"{json.loads(l)[\"avg_ts\"]:.1f} t/s") for l in sys.stdin if l.strip()]'
      done
      ;;
    *) echo "decode_session: unknown stage $stage" >&2; exit 2 ;;
  esac
done
