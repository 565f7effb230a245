#include "core/env.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include <unistd.h>  // environ

#include "core/ascii.h"
#include "core/error.h"
#include "core/log.h"

namespace minfer {
namespace {

// The table. Keep it sorted by name; every MINFER_* variable read anywhere must be here. A row's
// choices (and, for an Int, its range) are what env_check accepts and what the accessors return:
// a reader never sees a value outside them.
constexpr std::array kTable = {
    EnvVar{"MINFER_CACHE_TYPE", "", "KV cache format when --cache-type (bench: -ctk) is not given: f32, f16 or q8_0", EnvKind::Text,
           "f32|f16|q8_0"},
    EnvVar{"MINFER_CUDA_ATTN_CHUNK", "0",
           "tuning: KV cells per range of the CUDA decode attention (0: chosen from the window and the SM count)", EnvKind::Int,
           nullptr, 0},
    EnvVar{"MINFER_CUDA_ATTN_HEAD_SLICES", "0",
           "tuning: blocks per KV head of the CUDA decode attention (0: one per query head for windows of up to 256 cells, else from the GQA group and head_dim)",
           EnvKind::Int, nullptr, 0, 65535},
    EnvVar{"MINFER_CUDA_F16_CHUNK_MB", "512",
           "tuning: MiB of dequantized f16 weight rows per chunk of the CUDA f16 prefill GEMM (MINFER_CUDA_PREFILL_MATMUL)", EnvKind::Int,
           nullptr, 1, 4096},
    EnvVar{"MINFER_CUDA_FAIL_LAUNCH", "",
           "test only: make the CUDA launch whose site name matches this value fail (failure injection)", EnvKind::Text},
    EnvVar{"MINFER_CUDA_HGEMM_BK", "0",
           "tuning: k elements per pipeline stage of the CUDA f16/bf16 prefill GEMM (0 = default, 32 or 64; A/B)", EnvKind::Int,
           "0|32|64"},
    EnvVar{"MINFER_CUDA_HGEMM_SPLIT", "0",
           "tuning: k splits of every CUDA f16/bf16 prefill GEMM (0 = chosen per shape, 1 = none, up to 8; A/B)", EnvKind::Int,
           nullptr, 0, 8},
    EnvVar{"MINFER_CUDA_HGEMM_TILE", "0",
           "tuning: weight rows per block of the CUDA f16/bf16 prefill GEMM (0 = chosen per shape, 64 or 128; A/B)", EnvKind::Int,
           "0|64|128"},
    EnvVar{"MINFER_CUDA_HGEMM_WGMMA", "1",
           "tuning: 1 = the CUDA f16/bf16 prefill GEMM uses its sm_90a warpgroup-MMA (wgmma) build on H100/H200, 0 = its mma.sync build (A/B)",
           EnvKind::Int, "0|1"},
    EnvVar{"MINFER_CUDA_L2_AHEAD_MB", "0",
           "tuning: MiB of the next decode product's weights that the CUDA one-super-block-per-lane kernel asks the L2 cache to fetch when its warps finish (0 = none; implies MINFER_CUDA_MMVQ_LANE_SPLIT=1; A/B)",
           EnvKind::Int, nullptr, 0, 48},
    EnvVar{"MINFER_CUDA_MMQ_SPLIT", "0",
           "CUDA MMQ k splits for small grids (sm_90 thread-block clusters): 0 = by shape, 1 = never split, 2..8 = that many where the thin token tile is used (A/B)",
           EnvKind::Int, nullptr, 0, 8},
    EnvVar{"MINFER_CUDA_MMQ_TILE", "0",
           "CUDA MMQ token tile: 0 = chosen per shape, 32, 64 or 128 = always that tile (A/B measurements)", EnvKind::Int,
           "0|32|64|128"},
    EnvVar{"MINFER_CUDA_MMVQ_KB", "0",
           "tuning: 2 makes the direct Q4_K/Q5_K matrix-vector kernel take 16 super-blocks per warp and step (0 or 1: 8)", EnvKind::Int,
           "0|1|2"},
    EnvVar{"MINFER_CUDA_MMVQ_LANE", "1",
           "CUDA decode (n = 1) Q4_K/Q5_K/Q6_K matrix-vector products: 1 = one super-block per lane (mmvq_lane.cu), 0 = never (A/B)",
           EnvKind::Int, "0|1"},
    EnvVar{"MINFER_CUDA_MMVQ_LANE_BLOCK_WARPS", "0",
           "tuning: warps per block of the one-super-block-per-lane decode kernel (0 = 16 for rows of more than 16 super-blocks, else 8; 1..16; fewer when shared memory is short)",
           EnvKind::Int, nullptr, 0, 16},
    EnvVar{"MINFER_CUDA_MMVQ_LANE_MIXED", "1",
           "CUDA decode: 1 (default) = q/k/v projections of two K-quant types (Q4_K q/k with a Q6_K v, ...) in one launch of the one-super-block-per-lane kernel, 0 = one launch per type (A/B)",
           EnvKind::Int, "0|1"},
    EnvVar{"MINFER_CUDA_MMVQ_LANE_QUANTIZE", "1",
           "CUDA decode: 1 = the one-super-block-per-lane kernel quantizes f32 activations itself where it serves a product (no quantize launch), 0 = a separate quantize launch (A/B)",
           EnvKind::Int, "0|1"},
    EnvVar{"MINFER_CUDA_MMVQ_LANE_SPLIT", "0",
           "tuning: how the one-super-block-per-lane decode kernel deals row groups to its warps: 0 = a contiguous run per warp, 1 = round robin (warp w takes groups w, w + W, ...; A/B)",
           EnvKind::Int, "0|1"},
    EnvVar{"MINFER_CUDA_MMVQ_LANE_STAGES", "0",
           "tuning: shared-memory stages per warp of the one-super-block-per-lane decode kernel (0 = 2 for every type; 2..4; deeper rings that do not fit fall back)",
           EnvKind::Int, "0|2|3|4"},
    EnvVar{"MINFER_CUDA_MMVQ_LANE_WARPS", "0",
           "test only: most warps in a grid of the one-super-block-per-lane decode kernel (0 = as many as fit), so each warp walks many row groups",
           EnvKind::Int, nullptr, 0},
    EnvVar{"MINFER_CUDA_MMVQ_MMA", "1",
           "CUDA Q4_K/Q5_K/Q6_K products of 3..8 token columns: 1 = the tensor-core kernel (mmvq_mma.cu, 4 warps a tile), 2 = its 8-warp variant, 0 = the dp4a kernels (A/B); same bits",
           EnvKind::Int, "0|1|2"},
    EnvVar{"MINFER_CUDA_MMVQ_OCC", "0",
           "CUDA decode (n = 1) matrix-vector kernels compiled for 5 blocks per SM: 0 = for rows of up to 4096 elements, 1 = never, 2 = always (A/B)", EnvKind::Int,
           "0|1|2"},
    EnvVar{"MINFER_CUDA_MMVQ_Q6K", "1",
           "CUDA Q6_K matrix-vector kernel: 0 = shared-memory staged, 1 = direct-load for rows up to 4096 elements, 2 = direct-load for every row (A/B)", EnvKind::Int,
           "0|1|2"},
    EnvVar{"MINFER_CUDA_MMVQ_STAGED", "0",
           "1: CUDA Q4_K/Q5_K/Q6_K matrix-vector products use the shared-memory staged kernel, not the direct-load ones (A/B)", EnvKind::Flag},
    EnvVar{"MINFER_CUDA_NO_FLASH_ATTN", "0",
           "1: CUDA prefill attention (nt > 8) uses the split-K kernel instead of the flash kernel (A/B, fallback)", EnvKind::Flag},
    EnvVar{"MINFER_CUDA_NO_INPUT_GATHER", "0",
           "1: each CUDA input upload is its own DMA copy (default: uploads of up to 64 KiB are gathered into one scatter kernel before the next stream operation; A/B)",
           EnvKind::Flag},
    EnvVar{"MINFER_CUDA_PREFILL_MATMUL", "auto",
           "CUDA prefill matmuls (n > 8) on quantized weights: mmq = int8 tensor-core MMQ, f16 = f16 tensor-core GEMM over dequantized weights, auto = by shape", EnvKind::Text,
           "auto|mmq|f16"},
    EnvVar{"MINFER_CUDA_PROFILE", "0",
           "1: time every CUDA node with events (direct launches, no graphs); print a table per op class at exit", EnvKind::Flag},
    EnvVar{"MINFER_CUDA_STAGED_READBACK", "0",
           "1: CUDA logits readbacks go through the pinned staging buffer and a host copy even into page-locked memory (default: one DMA copy straight into the engine's page-locked logits; A/B)",
           EnvKind::Flag},
    EnvVar{"MINFER_CUDA_TRACE_OUT", "cuda_trace.csv",
           "profiling: the CSV file the kernel-timeline tracer (tools/cuda_trace, loaded through CUDA_INJECTION64_PATH) writes at exit; minfer itself does not read it",
           EnvKind::Text},
    EnvVar{"MINFER_DISABLE_CUDA", "0", "1: behave as if no CUDA device were present", EnvKind::Flag},
    EnvVar{"MINFER_GRAPH_DUMP", "",
           "a file (.dot or .json) the engine writes its prepared graphs to, one per ubatch shape (at most 8), as run/bench's --graph-dump does",
           EnvKind::Text},
    EnvVar{"MINFER_LOG", "info", "log level: error, warn, info, debug", EnvKind::Text, "error|warn|info|debug"},
    EnvVar{"MINFER_NO_CPU_PACK", "0", "1: CPU matmuls read the weights in place (no packed copies)", EnvKind::Flag},
    EnvVar{"MINFER_NO_CUDA_GRAPH", "0", "1: never capture or replay CUDA graphs (direct launches only)", EnvKind::Flag},
    EnvVar{"MINFER_NO_MMQ", "0",
           "1: CUDA prefill matmuls (n > 8) on quantized weights use the f32 GEMM instead of the f16 tensor-core GEMM or the int8 MMQ", EnvKind::Flag},
    EnvVar{"MINFER_NO_PDL", "0",
           "1: CUDA decode kernels launch without programmatic dependent launch (each waits for the previous to end)", EnvKind::Flag},
    EnvVar{"MINFER_NO_PREFILL_CAPTURE", "0", "1: capture only decode-shaped (1-token) graphs", EnvKind::Flag},
    EnvVar{"MINFER_OP_TIMING", "0",
           "1: time every graph node (CPU: a clock around each node; CUDA: events, graphs off) and print a per-op table for prefill and decode when the command ends (run/bench --profile)",
           EnvKind::Flag},
    EnvVar{"MINFER_POOL_BACKOFF_MS", "100",
           "tuning: milliseconds a CPU pool's loops run on the calling thread alone after it waited for descheduled threads' pieces twice within 20 ms, doubled (up to 16x) when that happens again right after a back-off (0: never; A/B)",
           EnvKind::Int, nullptr, 0, 60000},
    EnvVar{"MINFER_POOL_CHUNKS", "4",
           "tuning: pieces per CPU thread that a parallel loop is cut into, claimed by whichever thread is free (1: one range per thread; A/B)",
           EnvKind::Int, nullptr, 1, 64},
    EnvVar{"MINFER_POOL_SPIN_US", "50",
           "tuning: microseconds a CPU pool thread spins waiting for work or for the others before it sleeps (0: sleep at once; A/B)",
           EnvKind::Int, nullptr, 0, 100000},
    EnvVar{"MINFER_SHARED_DIR", "", "tests: where ../shared (fixtures, models) lives, when not beside the checkout", EnvKind::Text},
    EnvVar{"MINFER_SIMD", "auto", "CPU kernel level: auto, scalar, avx2, avx512 (never above what the CPU has)", EnvKind::Text,
           "auto|scalar|avx2|avx512"},
    EnvVar{"MINFER_TEST_WRITE_SIGNAL", "0",
           "test only: the GGUF writer raises this signal number (15: SIGTERM) after writing the first tensor (0: none)",
           EnvKind::Int, nullptr, 0, 64},  // 64: SIGRTMAX on Linux
    EnvVar{"MINFER_THREADS", "", "default thread count for CPU work (0 or unset: the number of cores)", EnvKind::Int, nullptr, 0},
    EnvVar{"MINFER_TRACE", "0",
           "1: every forward runs node by node and logs each node's output statistics (min, max, mean, NaN/Inf counts) and the first node with a non-finite output (debugging; CUDA graphs off)",
           EnvKind::Flag},
};

// MINFER_* variables that the project's scripts read, never the binary (the CUDA architectures of
// scripts/device_bundle.sh and scripts/cuda_test.sh): set in a shell that also runs minfer or
// its tests, they are not misspellings, so env_unknown does not report them.
constexpr std::array<std::string_view, 1> kScriptVars = {"MINFER_CUDA_ARCHS"};

struct Cache {
  std::mutex mu;
  std::map<std::string, std::string, std::less<>> values;
};

Cache& cache() {
  static Cache c;
  return c;
}

const EnvVar& row(std::string_view name) {
  for (const auto& v : kTable)
    if (name == v.name) return v;
  throw Error(fmt::format("internal error: environment variable {} is not in the env table "
                          "(src/core/env.cpp)", name));
}

/// The row's choices, in table order ("a|b|c" -> {"a", "b", "c"}).
std::vector<std::string_view> choices_of(const EnvVar& r) {
  std::vector<std::string_view> out;
  std::string_view rest = r.choices != nullptr ? r.choices : "";
  while (!rest.empty()) {
    const size_t bar = rest.find('|');
    out.push_back(rest.substr(0, bar));
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
  }
  return out;
}

/// "a, b, c": the choices as an error message lists them.
std::string choice_list(const EnvVar& r) {
  std::string out;
  for (std::string_view c : choices_of(r)) out += (out.empty() ? "" : ", ") + std::string(c);
  return out;
}

/// What an Int row allows, for an error message: "one of 0, 32, 64, 128", "0 or more", "1 to 8"
/// (a row without a range: the 64-bit limits).
std::string int_allowed(const EnvVar& r) {
  if (r.choices != nullptr) return "one of " + choice_list(r);
  if (r.max == std::numeric_limits<int64_t>::max() && r.min != std::numeric_limits<int64_t>::min())
    return fmt::format("{} or more", r.min);
  return fmt::format("{} to {}", r.min, r.max);
}

/// Levenshtein distance (insertions, deletions and substitutions of one character each cost 1).
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return s;
}

/// A value as an error message shows it: quoted when it is empty or starts or ends with white
/// space (`MINFER_LOG="debug "` must not read as "debug is not debug"), cut after 60 characters
/// (a pasted file must not flood the one error line).
std::string shown(std::string_view v) {
  constexpr size_t kMax = 60;
  std::string out(v.substr(0, kMax));
  const bool quote = v.empty() || std::isspace(static_cast<unsigned char>(v.front())) != 0 ||
                     std::isspace(static_cast<unsigned char>(v.back())) != 0;
  if (quote) out = "\"" + out + (v.size() > kMax ? "" : "\"");
  if (v.size() > kMax) out += fmt::format("... ({} characters)", v.size());
  return out;
}

/// Refuses a gate read with the wrong accessor (an internal error: the table row is wrong).
void check_kind(std::string_view name, EnvKind want) {
  if (row(name).kind != want)
    throw Error(fmt::format("internal error: environment variable {} is read as another kind than its env table "
                            "row says (src/core/env.cpp)",
                            name));
}

}  // namespace

std::span<const EnvVar> env_table() { return kTable; }

const std::string& env_string(std::string_view name) {
  const EnvVar& r = row(name);
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  auto it = c.values.find(name);
  if (it == c.values.end()) {
    const char* v = std::getenv(r.name);
    it = c.values.emplace(std::string(name), v ? std::string(v) : std::string(r.default_value))
             .first;
  }
  return it->second;
}

void env_override(std::string_view name, std::optional<std::string> value) {
  const EnvVar& r = row(name);
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  const char* v = std::getenv(r.name);
  std::string now = value ? *value : v ? std::string(v) : std::string(r.default_value);
  auto it = c.values.find(name);
  if (it == c.values.end()) c.values.emplace(std::string(name), std::move(now));
  else it->second = std::move(now);
}

bool env_flag(std::string_view name) {
  check_kind(name, EnvKind::Flag);
  const std::string v = ascii_lower(env_string(name));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  fail("environment variable {}={} is not a boolean (use 1 or 0; true/false, yes/no, on/off)", name,
       shown(env_string(name)));
}

int64_t env_int(std::string_view name, int64_t fallback) {
  check_kind(name, EnvKind::Int);
  const EnvVar& r = row(name);
  const std::string& v = env_string(name);
  if (v.empty()) return fallback;
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (p != v.data() + v.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    fail("environment variable {}={} is not an integer", name, shown(v));
  if (ec == std::errc::result_out_of_range || out < r.min || out > r.max)
    fail("environment variable {}={} is out of range (allowed: {})", name, shown(v), int_allowed(r));
  if (r.choices != nullptr) {
    const auto choices = choices_of(r);
    const auto is_out = [&](std::string_view c) {
      int64_t n = 0;
      const auto [cp, cec] = std::from_chars(c.data(), c.data() + c.size(), n);
      return cec == std::errc() && cp == c.data() + c.size() && n == out;
    };
    if (std::none_of(choices.begin(), choices.end(), is_out))
      fail("environment variable {}={} is not one of {}", name, shown(v), choice_list(r));
  }
  return out;
}

std::string env_choice(std::string_view name) {
  check_kind(name, EnvKind::Text);
  const EnvVar& r = row(name);
  if (r.choices == nullptr)
    throw Error(fmt::format("internal error: environment variable {} is free text, not a choice (src/core/env.cpp)", name));
  const std::string v = ascii_lower(env_string(name));
  if (v.empty()) return ascii_lower(r.default_value);
  const auto choices = choices_of(r);
  if (std::none_of(choices.begin(), choices.end(), [&](std::string_view c) { return c == v; }))
    fail("environment variable {}={} is not one of {}", name, shown(env_string(name)), choice_list(r));
  return v;
}

std::vector<UnknownEnvVar> env_unknown() {
  std::vector<UnknownEnvVar> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    const std::string_view name = entry.substr(0, eq);
    if (upper(std::string(name)).rfind("MINFER_", 0) != 0) continue;
    if (std::any_of(kTable.begin(), kTable.end(), [&](const EnvVar& v) { return name == v.name; })) continue;
    if (std::find(kScriptVars.begin(), kScriptVars.end(), name) != kScriptVars.end()) continue;
    UnknownEnvVar u{std::string(name), eq == std::string_view::npos ? std::string() : std::string(entry.substr(eq + 1)), ""};
    const std::string key = upper(u.name);
    // Suggest only a name at most 3 edits away and closer than half the length of the part after
    // "MINFER_" (MINFER_FOO is not a misspelled MINFER_LOG); on a tie, the first by name.
    const size_t suffix = key.size() > 7 ? key.size() - 7 : 0;
    size_t best = 4;
    for (const EnvVar& v : kTable)
      if (const size_t d = edit_distance(key, v.name); d < best && 2 * d < suffix) best = d, u.suggestion = v.name;
    out.push_back(std::move(u));
  }
  std::sort(out.begin(), out.end(), [](const UnknownEnvVar& a, const UnknownEnvVar& b) { return a.name < b.name; });
  return out;
}

std::string env_unknown_message(const UnknownEnvVar& v) {
  const std::string hint = v.suggestion.empty() ? "" : "; did you mean " + v.suggestion + "?";
  return fmt::format("environment variable {} is unknown and ignored{} ('minfer env' lists the known ones)", v.name, hint);
}

void env_check_value(const EnvVar& v) {
  if (v.kind == EnvKind::Flag) (void)env_flag(v.name);
  if (v.kind == EnvKind::Int) (void)env_int(v.name, 0);
  if (v.kind == EnvKind::Text && v.choices != nullptr) (void)env_choice(v.name);
}

void env_check() {
  for (const EnvVar& v : kTable)
    if (std::getenv(v.name) != nullptr) env_check_value(v);
  for (const UnknownEnvVar& u : env_unknown()) log_warn("{}", env_unknown_message(u));
}

void env_reload() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  c.values.clear();
}

}  // namespace minfer
