#!/usr/bin/env bash
# Side-by-side decode benchmark of llama.cpp against minfer on the device machine (no internet):
# builds llama-bench from a pruned llama.cpp source tarball carried with the work tree, makes the
# benchmark models with `minfer synth --distinct-rows 64` (the decode_session.sh files), then runs
# both tools on each file in interleaved rounds so both see the same machine state.
#   build   unpacks LLAMA_SRC_TARBALL into LLAMA_SRC (default /tmp/llama-src) and builds
#           PEER_TARGETS (default llama-bench) into LLAMA_BUILD (default /tmp/llama-build;
#           -DGGML_CUDA=ON, sm_90, Release, ninja -j16) with the log in OUTDIR/peer_build.log;
#           skipped when LLAMA_BUILD/bin has all of them (an interrupted build resumes where it
#           stopped); llama-server in PEER_TARGETS configures with -DLLAMA_BUILD_SERVER=ON and no
#           web UI (-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF: no download)
#   models  Qwen2.5-0.5B, 1.5B, 7B in Q4_K_M, Q8_0, Q4_0 and Qwen3-8B Q4_K_M into MODELS_DIR
#           (default /tmp/minfer-models), made when missing
#   rounds  ROUNDS (default 2) rounds per row of tg128 (-p 0 -n 128 -r 5): llama-bench -ngl 99 -fa 1
#           and minfer bench --device cuda, the first tool alternating per round
#   table   OUTDIR/side_by_side.md (also printed): per-round and median t/s of both, the ratio
#           minfer/llama.cpp and the % of the weight-streaming roofline BW_GBS (default 4233,
#           the H200's GB/s) / file bytes; every JSON line, tagged with tool, row and round, in
#           OUTDIR/side_by_side.jsonl; the stderr of every run in OUTDIR/peer_runs.log and of
#           synth in OUTDIR/peer_synth.log (few files: the device tool returns only so many)
# A row that fails (synth, either tool) is reported in the table and the script goes on.
#
#   scripts/peer_side_by_side.sh LLAMA_SRC_TARBALL VOCAB.gguf OUTDIR
#   ROWS="7b:q4_K_M 8b:q4_K_M" ROUNDS=3 scripts/peer_side_by_side.sh .carry/llama-src.tar.xz \
#       models/minfer-demo-py-q6_K.gguf /tmp/sbs
#   scripts/peer_side_by_side.sh --table OUTDIR      # redo the table from OUTDIR/side_by_side.jsonl
# Environment: ROWS (SIZE:TYPE list; sizes 0.5b 1.5b 7b (Qwen2.5), 0.6b 8b (Qwen3); none: build
#   only, e.g. a first device call when the build and all rows would not fit in one), ROUNDS,
#   GEN (tokens, default 128), REPS (repetitions per run, default 5), BW_GBS, MODELS_DIR,
#   LLAMA_SRC, LLAMA_BUILD (e.g. .carry/llama-build, inside the work tree, to keep the build
#   between device calls), LLAMA_BENCH (a llama-bench to use instead of building one),
#   JOBS (build jobs, default 16), PEER_TARGETS (ninja targets to build, default llama-bench;
#   e.g. "llama-bench llama-server"), PEER_DEVICE (cuda, or cpu: a CPU-only build, -ngl 0 and
#   --device cpu, for a test run on a machine without a GPU), THREADS (-t for both tools).
set -uo pipefail
caller=$PWD
cd "$(dirname "$0")/.." || exit 1
root=$PWD
abspath() { [[ $1 == /* ]] && echo "$1" || echo "$caller/$1"; }  # arguments are relative to the caller

table() {  # OUTDIR: side_by_side.jsonl -> side_by_side.md, also printed
  python3 - "$1/side_by_side.jsonl" "$1/side_by_side.md" "${BW_GBS:-4233}" "${PEER_DEVICE:-cuda}" <<'PY'
import json, os, statistics, sys
src, dst, bw, device = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
rows, order = {}, []   # row -> {"file", "llama.cpp": {round: t/s}, "minfer": {...}, "errors", "notes"}
n_gen, builds, gpus = None, set(), set()
for line in open(src):
    line = line.strip()
    if not line.startswith("{"):
        continue
    j = json.loads(line)
    row = j["row"]
    if row not in rows:
        rows[row] = {"file": j.get("file"), "bytes": j.get("file_bytes"), "llama.cpp": {}, "minfer": {}, "errors": [], "notes": set()}
        order.append(row)
    r = rows[row]
    r["bytes"] = r["bytes"] or j.get("file_bytes")
    r["file"] = r["file"] or j.get("file")
    if "error" in j:
        rnd = f" round {j['round']}" if j.get("round") else ""
        r["errors"].append(f"{j['tool']}{rnd}: {j['error']}")
        continue
    if j.get("n_prompt", 0) != 0 or j.get("n_depth", 0) != 0:
        continue  # only the tgN test goes into the table
    n_gen = j.get("n_gen", n_gen)
    if j["tool"] == "llama.cpp":
        builds.add(str(j.get("build_commit")))
        if j.get("gpu_info"):
            gpus.add(j["gpu_info"])
    r[j["tool"]][j["round"]] = j["avg_ts"]
    if j["tool"] == "llama.cpp" and device == "cuda" and "CUDA" not in j.get("backends", ""):
        r["notes"].add(f"llama.cpp backends {j.get('backends')!r}")
    if j["tool"] == "llama.cpp" and device == "cuda" and j.get("n_gpu_layers", 99) < 99:
        r["notes"].add(f"llama.cpp n_gpu_layers {j.get('n_gpu_layers')}")

def cell(runs):
    return " ".join(f"{runs[k]:.1f}" for k in sorted(runs)) or "-"

def med(runs):
    return statistics.median(runs.values()) if runs else None

fmt = lambda x, spec: "-" if x is None else format(x, spec)
tg = f"tg{n_gen}" if n_gen else "tg"
out = [f"| model | type | file GiB | llama.cpp {tg} t/s (rounds) | llama.cpp median | "
       f"minfer {tg} t/s (rounds) | minfer median | minfer/llama | roofline t/s | "
       f"llama.cpp % roofline | minfer % roofline |",
       "| --- | --- | ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
notes = []
for row in order:
    r = rows[row]
    size, typ = row.split(":", 1)
    name = {"0.5b": "Qwen2.5-0.5B", "1.5b": "Qwen2.5-1.5B", "7b": "Qwen2.5-7B",
            "0.6b": "Qwen3-0.6B", "8b": "Qwen3-8B"}.get(size, size)
    f = r["file"]
    nbytes = r["bytes"] or (os.path.getsize(f) if f and os.path.exists(f) else None)
    roof = bw * 1e9 / nbytes if nbytes else None  # t/s if every token streams the whole file once
    lm, mm = med(r["llama.cpp"]), med(r["minfer"])
    ratio = mm / lm if lm and mm else None
    pct = lambda x: 100 * x / roof if x and roof else None
    out.append(f"| {name} | {typ} | {fmt(nbytes and nbytes / 2**30, '.2f')} | {cell(r['llama.cpp'])} | "
               f"{fmt(lm, '.1f')} | {cell(r['minfer'])} | {fmt(mm, '.1f')} | {fmt(ratio, '.3f')} | "
               f"{fmt(roof, '.1f')} | {fmt(pct(lm), '.1f')} | {fmt(pct(mm), '.1f')} |")
    notes += [f"- {row}: {e}" for e in r["errors"]] + [f"- {row}: {n}" for n in sorted(r["notes"])]
text = "\n".join(out) + "\n"
text += (f"\nroofline: {bw:g} GB/s / file bytes; rounds alternate which tool runs first; "
         f"llama.cpp {', '.join(sorted(builds)) or '?'} on {', '.join(sorted(gpus)) or device}.\n")
if notes:
    text += "\nproblems:\n" + "\n".join(notes) + "\n"
open(dst, "w").write(text)
print(text, end="")
PY
}

if [[ ${1:-} == --table ]]; then
  table "$(abspath "${2:?usage: peer_side_by_side.sh --table OUTDIR}")"
  exit
fi

usage="usage: peer_side_by_side.sh LLAMA_SRC_TARBALL VOCAB.gguf OUTDIR"
tarball=$(abspath "${1:?$usage}")
vocab=$(abspath "${2:?$usage}")
out=$(abspath "${3:?$usage}")
mkdir -p "$out"
out=$(cd "$out" && pwd)
[[ ! -d .device && -f .device.tar.xz ]] && tar -xJf .device.tar.xz
bin=.device/bin
[[ -x $bin/minfer ]] || { echo "peer_side_by_side: no $bin/minfer (run scripts/device_bundle.sh here first)" >&2; exit 1; }
models=${MODELS_DIR:-/tmp/minfer-models}
mkdir -p "$models"
device=${PEER_DEVICE:-cuda}
rounds=${ROUNDS:-2} gen=${GEN:-128} reps=${REPS:-5}
case $device in
  cuda) llama_dev=(-ngl 99 -fa 1) minfer_dev=(--device cuda) cuda_flags=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_CUDA_NCCL=OFF)
        lsrc=${LLAMA_SRC:-/tmp/llama-src} lbuild=${LLAMA_BUILD:-/tmp/llama-build} ;;
  cpu)  llama_dev=(-ngl 0 -fa 1) minfer_dev=(--device cpu) cuda_flags=(-DGGML_CUDA=OFF)
        lsrc=${LLAMA_SRC:-/tmp/llama-src-cpu} lbuild=${LLAMA_BUILD:-/tmp/llama-build-cpu} ;;
  *) echo "peer_side_by_side: PEER_DEVICE is cuda or cpu, not $device" >&2; exit 2 ;;
esac
threads=()
[[ -n ${THREADS:-} ]] && threads=(-t "$THREADS")
command -v nvidia-smi >/dev/null && [[ $device == cuda ]] &&
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader

# ---- build: PEER_TARGETS from the pruned tarball (PRUNED.txt inside says what was dropped)
llama=${LLAMA_BENCH:-$lbuild/bin/llama-bench}
targets=${PEER_TARGETS:-llama-bench}
server_flags=(-DLLAMA_BUILD_SERVER=OFF)
[[ " $targets " == *" llama-server "* ]] &&
  server_flags=(-DLLAMA_BUILD_SERVER=ON -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF)
missing=()
for t in $targets; do
  [[ $t == llama-bench && -x $llama ]] || [[ -x $lbuild/bin/$t ]] || missing+=("$t")
done
if ((${#missing[@]})); then
  t0=$(date +%s)
  if [[ ! -f $lbuild/build.ninja ]]; then
    rm -rf "$lsrc" && mkdir -p "$lsrc" && tar -xJf "$tarball" -C "$lsrc" --strip-components=1 ||
      { echo "peer_side_by_side: cannot unpack $tarball" >&2; exit 1; }
    commit=$(cat "$lsrc/.commit" 2>/dev/null || echo unknown)
    if [[ $device == cuda ]] && ! command -v nvcc >/dev/null; then  # the toolkit off PATH
      nvcc=$(ls -d /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc 2>/dev/null | tail -1)
      [[ -n $nvcc ]] && cuda_flags+=(-DCMAKE_CUDA_COMPILER="$nvcc")
    fi
    echo "peer build: configuring llama.cpp $commit in $lbuild"
    cmake -S "$lsrc" -B "$lbuild" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_flags[@]}" \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "${server_flags[@]}" -DLLAMA_BUILD_APP=OFF \
      -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_COMMIT="$commit" >"$out/peer_build.log" 2>&1 ||
      { tail -30 "$out/peer_build.log"; echo "peer_side_by_side: llama.cpp configure failed" >&2; rm -f "$lbuild/build.ninja"; exit 1; }
  elif [[ $server_flags == -DLLAMA_BUILD_SERVER=ON ]] && ! ninja -C "$lbuild" -t query llama-server >/dev/null 2>&1; then
    echo "peer build: reconfiguring $lbuild with the server"  # configured earlier for llama-bench only
    cmake "$lbuild" "${server_flags[@]}" >"$out/peer_build.log" 2>&1 ||
      { tail -30 "$out/peer_build.log"; echo "peer_side_by_side: llama.cpp configure failed" >&2; exit 1; }
  fi
  echo "peer build: ninja -j${JOBS:-16} ${missing[*]} (log $out/peer_build.log)"
  ninja -C "$lbuild" -j"${JOBS:-16}" "${missing[@]}" >>"$out/peer_build.log" 2>&1 ||
    { tail -30 "$out/peer_build.log"; echo "peer_side_by_side: ${missing[*]} build failed" >&2; exit 1; }
  echo "peer build: $(($(date +%s) - t0)) s"
fi
[[ -x $llama || ${ROWS:-} == none ]] || { echo "peer_side_by_side: no llama-bench at $llama" >&2; exit 1; }

last_line() { grep -v '^\s*$' "$1" | tail -1 | cut -c1-200; }  # a log's last words, for the table

fast_model() {  # arch preset type -> path of a --distinct-rows 64 file (made when missing)
  local f="$models/$2-$3-dr64.gguf" log rc
  if [[ ! -f $f ]]; then
    log=$(mktemp)
    LD_LIBRARY_PATH="$root/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin/minfer" synth --arch "$1" \
      --preset "$2" --type "$3" --seed 1 --distinct-rows 64 --vocab "$vocab" -o "$f.part" >"$log" 2>&1 &&
      mv "$f.part" "$f"
    rc=$?
    { echo "=== synth $2 $3: exit $rc"; cat "$log"; } >>"$out/peer_synth.log"
    if [[ $rc -ne 0 ]]; then
      rm -f "$f.part"
      echo "peer_side_by_side: synth $2 $3 failed (peer_synth.log): $(last_line "$log")" >&2
    fi
    rm -f "$log"
    [[ $rc -eq 0 ]] || return 1
  fi
  echo "$f"
}

jsonl=$out/side_by_side.jsonl
: >"$jsonl"
: >"$out/peer_runs.log"
: >"$out/peer_synth.log"
record() {  # tool row round file json-file|"" error: tags each JSON line of the run into $jsonl
  python3 - "$@" >>"$jsonl" <<'PY'
import json, os, sys
tool, row, rnd, path, src, err = sys.argv[1:7]
tag = {"tool": tool, "row": row, "round": int(rnd), "file": path,
       "file_bytes": os.path.getsize(path) if path and os.path.exists(path) else None}
lines = [l for l in (open(src) if src else []) if l.strip().startswith("{")]
if err or not lines:
    print(json.dumps({**tag, "error": err or "no JSON output"}))
for l in lines:
    print(json.dumps({**tag, **json.loads(l)}))
PY
}

run_tool() {  # tool row round file
  local tool=$1 row=$2 rnd=$3 f=$4 log tmp rc err=""
  tmp=$(mktemp) log=$(mktemp)
  if [[ $tool == llama.cpp ]]; then
    "$llama" -m "$f" "${llama_dev[@]}" "${threads[@]}" -p 0 -n "$gen" -r "$reps" -o jsonl >"$tmp" 2>"$log"
  else
    LD_LIBRARY_PATH="$root/.device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bin/minfer" bench -m "$f" \
      "${minfer_dev[@]}" "${threads[@]}" -p 0 -n "$gen" -r "$reps" -o jsonl >"$tmp" 2>"$log"
  fi
  rc=$?
  { echo "=== $tool $row round $rnd: exit $rc"; cat "$log"; } >>"$out/peer_runs.log"
  if [[ $rc -ne 0 ]]; then
    err="exit $rc: $(last_line "$log")"
  fi
  record "$tool" "$row" "$rnd" "$f" "$tmp" "$err"
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
  if l.strip().startswith("{"): print("  %-9s round %s: %.1f t/s" % (sys.argv[2], sys.argv[3], json.loads(l)["avg_ts"]))' \
    "$tmp" "$tool" "$rnd"
  [[ -n $err ]] && echo "  $tool round $rnd failed: $err (peer_runs.log)"
  rm -f "$tmp" "$log"
}

[[ ${ROWS:-} == none ]] && { echo "peer_side_by_side: ROWS=none, built only"; exit 0; }
all_rows="0.5b:q4_K_M 0.5b:q8_0 0.5b:q4_0 1.5b:q4_K_M 1.5b:q8_0 1.5b:q4_0 7b:q4_K_M 7b:q8_0 7b:q4_0 8b:q4_K_M"
for row in ${ROWS:-$all_rows}; do
  size=${row%%:*} type=${row#*:}
  case $size in
    0.5b|1.5b|7b) arch=qwen2 preset=qwen2.5-$size ;;
    0.6b|8b) arch=qwen3 preset=qwen3-$size ;;
    *) echo "peer_side_by_side: unknown size in row $row" >&2; record - "$row" 0 "" "" "unknown size"; continue ;;
  esac
  echo "==== $preset $type"
  f=$(fast_model "$arch" "$preset" "$type") ||
    { record synth "$row" 0 "" "" "failed: $(last_line "$out/peer_synth.log")"; continue; }
  for ((r = 1; r <= rounds; r++)); do
    if ((r % 2)); then tools=(llama.cpp minfer); else tools=(minfer llama.cpp); fi
    for tool in "${tools[@]}"; do run_tool "$tool" "$row" "$r" "$f"; done
  done
done

echo "==== side by side ($device, $out/side_by_side.md)"
table "$out"
