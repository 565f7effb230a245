#!/usr/bin/env bash
# Interleaved A/B of minfer against llama.cpp on the CPU, same file, same threads:
# ROUNDS rounds of (minfer bench -r 1, llama-bench -r 1) for each model, then the median t/s of
# each side per test and the ratio. llama.cpp is built outside this repository.
#
#   LLAMA_BENCH=/path/to/llama-bench scripts/cpu_ab.sh OUTDIR model1.gguf [model2.gguf ...]
# Environment: THREADS (default 2), ROUNDS (default 5), ARGS (default "-p 512 -n 128"),
# LOAD=1: a busy loop (one process spinning one core at 100%) runs for the whole comparison,
# started here before the first round and stopped on exit (issue 29's "under load" rows).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
shift
threads=${THREADS:-2}
rounds=${ROUNDS:-5}
read -r -a args <<<"${ARGS:--p 512 -n 128}"
minfer=${MINFER:-build/tools/minfer/minfer}
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
mkdir -p "$out"
if [[ "${LOAD:-0}" == 1 ]]; then
  bash -c 'while :; do :; done' &
  busy=$!
  trap 'kill "$busy" 2>/dev/null || true' EXIT
fi
: >"$out/minfer.jsonl"
: >"$out/llama.jsonl"
for ((r = 1; r <= rounds; r++)); do
  for m in "$@"; do
    "$minfer" bench -m "$m" -t "$threads" -r 1 -o jsonl "${args[@]}" >>"$out/minfer.jsonl"
    "$LLAMA_BENCH" -m "$m" -t "$threads" -r 1 -o jsonl "${args[@]}" 2>/dev/null >>"$out/llama.jsonl"
  done
done
python3 - "$out/minfer.jsonl" "$out/llama.jsonl" <<'PY'
import json, statistics, sys
def load(path):
    rows = {}
    for line in open(path):
        if not line.startswith("{"):
            continue
        j = json.loads(line)
        p, n = j["n_prompt"], j["n_gen"]
        test = f"pp{p}" if n == 0 else (f"tg{n}" if p == 0 else f"pp{p}+tg{n}")
        rows.setdefault((j["model_filename"].split("/")[-1], test), []).extend(j["samples_ts"])
    return rows
a, b = load(sys.argv[1]), load(sys.argv[2])
print(f"| model | test | minfer t/s (median) | llama.cpp t/s (median) | ratio | rounds |")
print(f"|---|---|---|---|---|---|")
for key in sorted(a):
    if key not in b:
        continue
    ma, mb = statistics.median(a[key]), statistics.median(b[key])
    print(f"| {key[0]} | {key[1]} | {ma:.2f} | {mb:.2f} | {ma / mb:.2f}x | {len(a[key])} |")
PY
