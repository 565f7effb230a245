#!/usr/bin/env bash
# Serving benchmark on the device machine: `minfer serve` and (when LLAMA_SERVER is set)
# llama-server on the same synth model (--ascii-output), each restarted per concurrency level with as many slots
# as clients (-np = concurrency, continuous batching on), driven by bench/serve_load.py
# (streaming /v1/completions, a distinct prompt of about PROMPT tokens per request, GEN tokens,
# greedy). The two servers alternate per level, so both see the same machine state.
#   scripts/serve_side_by_side.sh VOCAB.gguf OUTDIR
#   LLAMA_SERVER=/tmp/llama-build/bin/llama-server CONC="1 8 32 64" scripts/serve_side_by_side.sh \
#       models/minfer-demo-py-q6_K.gguf /tmp/serve
# Environment: SPEC (arch:preset:type, default qwen2:qwen2.5-7b:q4_K_M), CONC (levels, default
#   "1 8 32 64"), PROMPT (default 256), GEN (default 128), REQUESTS (per level, default 2 x level),
#   MODELS_DIR (default /tmp/minfer-models), MODEL (a GGUF to use instead of the synth one), LLAMA_SERVER, DEVICE (default cuda), EXTRA (more
#   minfer serve options).
# A level where either server has "short" requests (ended before GEN tokens or without [DONE])
# is not a comparison. Output: OUTDIR/serve.jsonl (one line per server and level, serve_load.py's fields plus "server"),
#   OUTDIR/serve.md (the table, also printed), the servers' logs OUTDIR/<server>-<level>.log.
set -uo pipefail
caller=$PWD
cd "$(dirname "$0")/.." || exit 1
abspath() { [[ $1 == /* ]] && echo "$1" || echo "$caller/$1"; }
[[ ! -d .device && -f .device.tar.xz ]] && tar -xJf .device.tar.xz
vocab=$(abspath "${1:?usage: serve_side_by_side.sh VOCAB.gguf OUTDIR}")
out=$(abspath "${2:?usage: serve_side_by_side.sh VOCAB.gguf OUTDIR}")
mkdir -p "$out"
bin=.device/bin
[[ -x $bin/minfer ]] || bin=build-cuda/tools/minfer
[[ -x $bin/minfer ]] || bin=build/tools/minfer
export LD_LIBRARY_PATH="$PWD/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
models_dir=${MODELS_DIR:-/tmp/minfer-models}
mkdir -p "$models_dir"
IFS=: read -r arch preset type <<<"${SPEC:-qwen2:qwen2.5-7b:q4_K_M}"
# --ascii-output: greedy decoding of the random model writes printable ASCII. Without it the
# streams hold malformed UTF-8, which llama-server refuses mid-stream (every llama-server stream
# of 2026-12-08 ended with "The model produced output that does not match the expected
# Content-only format"); the kernels' work is the same.
model=${MODEL:-$models_dir/$preset-$type-ascii.gguf}
[[ -f $model ]] || "$bin/minfer" synth --arch "$arch" --preset "$preset" --type "$type" --seed 1 --vocab "$vocab" \
  --distinct-rows 64 --ascii-output -o "$model" || exit 1
prompt=${PROMPT:-256} gen=${GEN:-128}
port=$((20000 + RANDOM % 20000))

wait_ready() {  # PID: until /health answers 200 (at most 300 s), or the server exits
  for _ in $(seq 600); do
    kill -0 "$1" 2>/dev/null || return 1
    python3 -c 'import sys, urllib.request
try: sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=2).status == 200 else 1)
except Exception: sys.exit(1)' "http://127.0.0.1:$port/health" && return 0
    sleep 0.5
  done
  return 1
}

one() {  # SERVER LEVEL
  local server=$1 c=$2 ctx pid
  ctx=$(((prompt + gen + 64) * c))
  ((ctx < 4096)) && ctx=4096
  port=$((port + 1))
  if [[ $server == minfer ]]; then
    # shellcheck disable=SC2086
    "$bin/minfer" serve -m "$model" --device "${DEVICE:-cuda}" -np "$c" -c "$ctx" --port "$port" ${EXTRA:-} \
      > "$out/$server-$c.log" 2>&1 &
  else
    "$LLAMA_SERVER" -m "$model" -ngl 99 -fa on -np "$c" -c "$ctx" --port "$port" --host 127.0.0.1 \
      > "$out/$server-$c.log" 2>&1 &
  fi
  pid=$!
  if ! wait_ready "$pid"; then
    echo "{\"server\": \"$server\", \"concurrency\": $c, \"error\": \"did not start\"}" >> "$out/serve.jsonl"
    kill -9 "$pid" 2>/dev/null
    return
  fi
  # One untimed request first (graph capture, allocator warm-up), then the level.
  python3 bench/serve_load.py --url "http://127.0.0.1:$port" -c 1 -n 1 --prompt-tokens "$prompt" --max-tokens 8 \
    --json > /dev/null
  python3 bench/serve_load.py --url "http://127.0.0.1:$port" -c "$c" ${REQUESTS:+-n "$REQUESTS"} \
    --prompt-tokens "$prompt" --max-tokens "$gen" --json |
    python3 -c 'import json,sys; s=sys.argv[1]
for l in sys.stdin: d=json.loads(l); d["server"]=s; print(json.dumps(d))' "$server" | tee -a "$out/serve.jsonl"
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
}

servers=(minfer)
[[ -n ${LLAMA_SERVER:-} ]] && servers+=(llama)
round=0
for c in ${CONC:-1 8 32 64}; do
  # The first server alternates per level.
  if ((round % 2 == 1)) && ((${#servers[@]} == 2)); then order=(llama minfer); else order=("${servers[@]}"); fi
  for s in "${order[@]}"; do one "$s" "$c"; done
  round=$((round + 1))
done

python3 - "$out/serve.jsonl" "$out/serve.md" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["concurrency"], {})[r["server"]] = r
lines = ["| concurrency | minfer t/s | llama-server t/s | ratio | minfer TTFT median ms | llama-server TTFT median ms | "
         "stream decode median t/s (m / l) | errors (m / l) | short (m / l) |",
         "|---|---|---|---|---|---|---|---|---|"]
def f(r, k, scale=1.0):
    return "-" if r is None or r.get(k) is None else f"{r[k] * scale:.1f}"
for c in sorted(by):
    m, l = by[c].get("minfer"), by[c].get("llama")
    ratio = f"{m['gen_tps'] / l['gen_tps']:.2f}x" if m and l and m.get("gen_tps") and l.get("gen_tps") else "-"
    errs = f"{(m or {}).get('errors', '-')} / {(l or {}).get('errors', '-')}"
    short = f"{(m or {}).get('short', '-')} / {(l or {}).get('short', '-')}"
    lines.append(f"| {c} | {f(m, 'gen_tps')} | {f(l, 'gen_tps')} | {ratio} | {f(m, 'ttft_median_s', 1000)} | "
                 f"{f(l, 'ttft_median_s', 1000)} | {f(m, 'decode_tps_median')} / {f(l, 'decode_tps_median')} | "
                 f"{errs} | {short} |")
open(sys.argv[2], "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
