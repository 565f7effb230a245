#include "core/env.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/error.h"

namespace minfer {
namespace {

// The table. Keep it sorted by name; every MINFER_* variable read anywhere must be here.
constexpr std::array kTable = {
    EnvVar{"MINFER_CACHE_TYPE", "", "KV cache format when --cache-type is not given: f32, f16 or q8_0", EnvKind::Text},
    EnvVar{"MINFER_CUDA_ATTN_CHUNK", "0",
           "tuning: KV cells per range of the CUDA decode attention (0: chosen from the window and the SM count)", EnvKind::Int},
    EnvVar{"MINFER_CUDA_FAIL_LAUNCH", "",
           "test only: make the CUDA launch whose site name matches this value fail (failure injection)", EnvKind::Text},
    EnvVar{"MINFER_CUDA_MMQ_TILE", "0",
           "CUDA MMQ token tile: 0 = chosen per shape, 32, 64 or 128 = always that tile (A/B measurements)", EnvKind::Int},
    EnvVar{"MINFER_CUDA_MMVQ_KB", "0",
           "tuning: 2 makes the direct Q4_K/Q5_K matrix-vector kernel take 16 super-blocks per warp and step (any other value: 8)", EnvKind::Int},
    EnvVar{"MINFER_CUDA_MMVQ_OCC", "0",
           "CUDA decode (n = 1) matrix-vector kernels compiled for 5 blocks per SM: 0 = for rows of up to 4096 elements, 1 = never, 2 = always (A/B)", EnvKind::Int},
    EnvVar{"MINFER_CUDA_MMVQ_Q6K", "1",
           "CUDA Q6_K matrix-vector kernel: 0 = shared-memory staged, 1 = direct-load for rows up to 4096 elements, 2 = direct-load for every row (A/B)", EnvKind::Int},
    EnvVar{"MINFER_CUDA_MMVQ_STAGED", "0",
           "1: CUDA Q4_K/Q5_K/Q6_K matrix-vector products use the shared-memory staged kernel, not the direct-load ones (A/B)", EnvKind::Flag},
    EnvVar{"MINFER_CUDA_NO_FLASH_ATTN", "0",
           "1: CUDA prefill attention (nt > 8) uses the split-K kernel instead of the flash kernel (A/B, fallback)", EnvKind::Flag},
    EnvVar{"MINFER_CUDA_PROFILE", "0",
           "1: time every CUDA node with events (direct launches, no graphs); print a table per op class at exit", EnvKind::Flag},
    EnvVar{"MINFER_DISABLE_CUDA", "0", "1: behave as if no CUDA device were present", EnvKind::Flag},
    EnvVar{"MINFER_LOG", "info", "log level: error, warn, info, debug", EnvKind::Text},
    EnvVar{"MINFER_NO_CPU_PACK", "0", "1: CPU matmuls read the weights in place (no packed copies)", EnvKind::Flag},
    EnvVar{"MINFER_NO_CUDA_GRAPH", "0", "1: never capture or replay CUDA graphs (direct launches only)", EnvKind::Flag},
    EnvVar{"MINFER_NO_MMQ", "0",
           "1: CUDA prefill matmuls (n > 8) on quantized weights use the GEMM instead of the int8 tensor-core MMQ", EnvKind::Flag},
    EnvVar{"MINFER_NO_PDL", "0",
           "1: CUDA decode kernels launch without programmatic dependent launch (each waits for the previous to end)", EnvKind::Flag},
    EnvVar{"MINFER_NO_PREFILL_CAPTURE", "0", "1: capture only decode-shaped (1-token) graphs", EnvKind::Flag},
    EnvVar{"MINFER_SHARED_DIR", "", "tests: where ../shared (fixtures, models) lives, when not beside the checkout", EnvKind::Text},
    EnvVar{"MINFER_SIMD", "auto", "CPU kernel level: auto, scalar, avx2, avx512 (never above what the CPU has)", EnvKind::Text},
    EnvVar{"MINFER_TEST_WRITE_SIGNAL", "0",
           "test only: the GGUF writer raises this signal number (15: SIGTERM) after writing the first tensor", EnvKind::Int},
    EnvVar{"MINFER_THREADS", "", "default thread count for CPU work (default: the number of cores)", EnvKind::Int},
};

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

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
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

bool env_flag(std::string_view name) {
  check_kind(name, EnvKind::Flag);
  const std::string v = lower(env_string(name));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v.empty() || v == "0" || v == "false" || v == "no" || v == "off") return false;
  fail("environment variable {}={} is not a boolean (use 1 or 0)", name, env_string(name));
}

int64_t env_int(std::string_view name, int64_t fallback) {
  check_kind(name, EnvKind::Int);
  const std::string& v = env_string(name);
  if (v.empty()) return fallback;
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size())
    fail("environment variable {}={} is not an integer", name, v);
  return out;
}

void env_check() {
  for (const EnvVar& v : kTable) {
    if (std::getenv(v.name) == nullptr) continue;
    if (v.kind == EnvKind::Flag) env_flag(v.name);
    if (v.kind == EnvKind::Int) env_int(v.name, 0);
  }
}

void env_reload() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  c.values.clear();
}

}  // namespace minfer
