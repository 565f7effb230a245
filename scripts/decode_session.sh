#!/usr/bin/env bash
# Decode-speed session on the device machine, from the bundle of scripts/device_bundle.sh (builds
# nothing). Stages (default: all, in this order):
#   tests    the device suites of the decode path (attention, fused matmuls, fusion, rope+store,
#            KV, engine identity) with a compact summary
#   profile  MINFER_CUDA_PROFILE=1 per-op device times of a 64-token decode on 1.5B Q4_K_M
#            (direct launches: absolute times include launch gaps)
#   bench    tg128 (-p 0 -n 128 -r 3) on the ANCHORS.md rows through scripts/device_bench.sh
#   sweep    decode attention ranges (MINFER_CUDA_ATTN_CHUNK) at 4096 cells of context on 7B
#   trace    kernel timelines of a 7B Q4_K_M decode (tools/cuda_trace through CUDA_INJECTION64_PATH)
#            at the defaults and with the decode switches below, summarized by
#            scripts/trace_summary.py (per-kernel critical-path steps) into OUTDIR/trace_*.txt
#   ab       interleaved A/B rounds (ROUNDS, default 2) of tg128 on 7B and 8B Q4_K_M: the defaults
#            against the variants below (VARIANTS overrides them); a table at the end
#   sanitize compute-sanitizer memcheck and racecheck over SANITIZE_FILTER (default: the host-path
#            and lane-kernel suites)
#
# Models: the speed stages use `synth --distinct-rows 64` files (benchmark shapes, seconds to make).
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

fast_model() {  # arch preset type -> path of a --distinct-rows 64 file (made when missing)
  local f="$models/$2-$3-dr64.gguf"
  [[ -f $f ]] || "$bin/minfer" synth --arch "$1" --preset "$2" --type "$3" --seed 1 --distinct-rows 64 --vocab "$vocab" \
    -o "$f" >/dev/null 2>&1 || { echo "decode_session: synth $2 $3 failed" >&2; return 1; }
  echo "$f"
}

# The decode switches the trace and ab stages compare: label, then the variables. The host path
# of a step (gathered inputs, logits read back by DMA into page-locked memory behind the graph)
# against each half of the old path and both (2026-12-02); VARIANTS="label|VARS;..." overrides.
variants=(
  "default|"
  "nogather|MINFER_CUDA_NO_INPUT_GATHER=1"
  "staged|MINFER_CUDA_STAGED_READBACK=1"
  "oldhost|MINFER_CUDA_NO_INPUT_GATHER=1 MINFER_CUDA_STAGED_READBACK=1"
)
if [[ -n "${VARIANTS:-}" ]]; then IFS=';' read -r -a variants <<<"$VARIANTS"; fi

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
    trace)
      echo "==== trace: 7B Q4_K_M, 48 decode tokens, kernel timelines"
      f=$(fast_model qwen2 qwen2.5-7b q4_K_M) || continue
      lib=$PWD/$bin/libminfer_cuda_trace.so
      [[ -f $lib ]] || { echo "decode_session: no $lib (a bundle built without CUPTI)"; continue; }
      for v in "${variants[@]}"; do
        label=${v%%|*} vars=${v#*|}
        env $vars CUDA_INJECTION64_PATH="$lib" MINFER_CUDA_TRACE_OUT="$out/trace_$label.csv" \
          "$bin/minfer" bench -m "$f" --device cuda -p 0 -n 48 -r 1 -o jsonl >/dev/null 2>"$out/trace_$label.err"
        python3 scripts/trace_summary.py "$out/trace_$label.csv" --positions >"$out/trace_$label.txt" 2>&1
        rm -f "$out/trace_$label.csv"
        echo "== $label ($vars)"
        sed -n '2,3p' "$out/trace_$label.txt"
        grep -A12 '^count' "$out/trace_$label.txt"
        grep -A16 '^gap between' "$out/trace_$label.txt"
      done
      ;;
    ab)
      echo "==== ab: tg128, interleaved rounds"
      f7=$(fast_model qwen2 qwen2.5-7b q4_K_M) || continue
      f8=$(fast_model qwen3 qwen3-8b q4_K_M) || continue
      : >"$out/ab.txt"
      for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
        for f in "$f7" "$f8"; do
          for v in "${variants[@]}"; do
            label=${v%%|*} vars=${v#*|}
            env $vars "$bin/minfer" bench -m "$f" --device cuda -p 0 -n 128 -r 5 -o jsonl 2>/dev/null |
              python3 -c 'import json,sys
for l in sys.stdin:
  if l.strip(): print(sys.argv[1], sys.argv[2], "%.1f" % json.loads(l)["avg_ts"])' "$(basename "$f" .gguf)" "$label" |
              tee -a "$out/ab.txt"
          done
        done
      done
      python3 - "$out/ab.txt" <<'PY'
import sys, statistics
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    m, label, ts = line.split()
    runs[(m, label)].append(float(ts))
for m in sorted({k[0] for k in runs}):
    base = statistics.median(runs[(m, "default")]) if (m, "default") in runs else None
    for (mm, label), v in runs.items():
        if mm != m: continue
        med = statistics.median(v)
        rel = f"{100 * (med / base - 1):+.1f}%" if base else ""
        print(f"{m:28s} {label:10s} median {med:8.1f} t/s  {rel:>7s}  runs {' '.join(f'{x:.1f}' for x in v)}")
PY
      ;;
    sanitize)
      filter=${SANITIZE_FILTER:-'CudaHostPath*:*CudaMmvqLane*:CudaLaneSchedule*'}
      echo "==== sanitize: memcheck and racecheck over $filter"
      [[ -z "${MINFER_SHARED_DIR:-}" && -d shared ]] && export MINFER_SHARED_DIR=$PWD/shared
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --print-limit 20 "$bin/minfer_tests" --gtest_color=no --gtest_brief=1 \
          --gtest_filter="$filter" >"$out/sanitize_$tool.log" 2>&1
        echo "$tool: exit $?, $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitize_$tool.log" | tail -1)"
      done
      ;;
    *) echo "decode_session: unknown stage $stage" >&2; exit 2 ;;
  esac
done
