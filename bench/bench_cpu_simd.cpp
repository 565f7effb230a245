// Single-thread throughput of the CPU kernel table (src/cpu/simd/) per weight type and level,
// at the Qwen2.5-0.5B shapes k = 896 (hidden) and k = 4864 (FFN; the only one for the K-quants,
// whose 256-element super-blocks do not divide 896):
//   vec_dot/<type>/<level>/<k>       one call per weight row, 512 rows, one activation row
//   decode/<type>/<level>/<k>        gemm_tile, 896 rows x 1 token   (generation)
//   prefill/<type>/<level>/<k>       gemm_tile, 256 rows x 128 tokens (prompt processing)
//   packed_decode/<type>/<level>/<k> gemm_packed on packed weights, 896 rows x 1 token
//   quantize_act/<act>/<level>/<k>   one activation row
// Counters: wGB/s = weight bytes read per second (each weight byte once per call), GFLOP/s =
// 2 * k * rows * tokens per second (a multiply-add counted as 2, as for f32 GEMM).
//   ./build/bench/bench_cpu_simd --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpu/simd/cpu_features.h"
#include "cpu/simd/kernels.h"
#include "quant/quant.h"

namespace {

using minfer::TensorType;
using minfer::cpu::simd::SimdLevel;

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

struct Problem {
  std::vector<uint8_t> w, a;
  size_t w_row = 0, a_row = 0;
};

Problem make_problem(TensorType t, int64_t k, int64_t rows, int64_t tokens) {
  const auto& tr = minfer::type_traits(t);
  Problem p;
  p.w_row = minfer::row_bytes(t, k);
  p.a_row = minfer::row_bytes(tr.vec_dot_type, k);
  p.w.resize(p.w_row * static_cast<size_t>(rows));
  p.a.resize(p.a_row * static_cast<size_t>(tokens));
  const auto wf = gaussian(static_cast<size_t>(k * rows), 1);
  const auto af = gaussian(static_cast<size_t>(k * tokens), 2);
  const auto& kk = minfer::cpu::simd::cpu_kernels(SimdLevel::kScalar).get(t);
  for (int64_t r = 0; r < rows; ++r) tr.quantize_row(wf.data() + r * k, p.w.data() + r * p.w_row, k);
  for (int64_t s = 0; s < tokens; ++s) kk.quantize_act(af.data() + s * k, p.a.data() + s * p.a_row, k);
  return p;
}

void counters(benchmark::State& st, const Problem& p, int64_t k, int64_t rows, int64_t tokens) {
  const double calls = static_cast<double>(st.iterations());
  st.counters["wGB/s"] = benchmark::Counter(calls * static_cast<double>(p.w_row * static_cast<size_t>(rows)) / 1e9,
                                            benchmark::Counter::kIsRate);
  st.counters["GFLOP/s"] = benchmark::Counter(calls * 2.0 * static_cast<double>(k * rows * tokens) / 1e9,
                                              benchmark::Counter::kIsRate);
}

void BM_vec_dot(benchmark::State& st, TensorType t, SimdLevel lv, int64_t k) {
  constexpr int64_t kRows = 512;
  const Problem p = make_problem(t, k, kRows, 1);
  const auto& kk = minfer::cpu::simd::cpu_kernels(lv).get(t);
  float sink = 0.0f;
  for (auto _ : st) {
    for (int64_t r = 0; r < kRows; ++r) sink += kk.vec_dot(k, p.w.data() + static_cast<size_t>(r) * p.w_row, p.a.data());
    benchmark::DoNotOptimize(sink);
  }
  counters(st, p, k, kRows, 1);
}

void BM_gemm(benchmark::State& st, TensorType t, SimdLevel lv, int64_t k, int64_t rows, int64_t tokens) {
  const Problem p = make_problem(t, k, rows, tokens);
  const auto& kk = minfer::cpu::simd::cpu_kernels(lv).get(t);
  std::vector<float> out(static_cast<size_t>(rows * tokens));
  for (auto _ : st) {
    kk.gemm_tile(k, p.w.data(), p.w_row, rows, p.a.data(), p.a_row, tokens, out.data(), rows);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  counters(st, p, k, rows, tokens);
}

void BM_gemm_packed(benchmark::State& st, TensorType t, SimdLevel lv, int64_t k, int64_t rows, int64_t tokens) {
  const Problem p = make_problem(t, k, rows, tokens);
  const auto& kk = minfer::cpu::simd::cpu_kernels(lv).get(t);
  std::vector<uint8_t> packed(kk.packed_bytes(k, rows));
  kk.pack(k, p.w.data(), p.w_row, rows, packed.data());
  std::vector<float> out(static_cast<size_t>(rows * tokens));
  for (auto _ : st) {
    kk.gemm_packed(k, packed.data(), rows, 0, rows, p.a.data(), p.a_row, tokens, out.data(), rows);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  counters(st, p, k, rows, tokens);
}

void BM_quantize_act(benchmark::State& st, TensorType wt, SimdLevel lv, int64_t k) {
  const auto& kk = minfer::cpu::simd::cpu_kernels(lv).get(wt);
  const auto x = gaussian(static_cast<size_t>(k), 3);
  std::vector<uint8_t> out(minfer::row_bytes(kk.vec_dot_type, k));
  for (auto _ : st) {
    kk.quantize_act(x.data(), out.data(), k);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * k * 4);
}

int register_all() {
  for (SimdLevel lv : {SimdLevel::kScalar, SimdLevel::kAvx2, SimdLevel::kAvx512}) {
    if (!minfer::cpu::simd::level_supported(lv)) continue;
    const std::string ln(minfer::cpu::simd::simd_level_name(lv));
    for (TensorType t : minfer::cpu::simd::kKernelTypes) {
      const std::string tn(minfer::type_name(t));
      const bool kq = minfer::type_traits(t).block_size == 256;
      for (int64_t k : {int64_t{896}, int64_t{4864}}) {
        if (kq && k % 256 != 0) continue;
        const std::string sfx = "/" + tn + "/" + ln + "/" + std::to_string(k);
        benchmark::RegisterBenchmark(("vec_dot" + sfx).c_str(), BM_vec_dot, t, lv, k)->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark(("decode" + sfx).c_str(), BM_gemm, t, lv, k, 896, 1)->Unit(benchmark::kMicrosecond);
        if (minfer::cpu::simd::cpu_kernels(lv).get(t).pack != nullptr)
          benchmark::RegisterBenchmark(("packed_decode" + sfx).c_str(), BM_gemm_packed, t, lv, k, 896, 1)
              ->Unit(benchmark::kMicrosecond);
        // The scalar prefill takes seconds per call; it is the same loop as its vec_dot.
        if (lv != SimdLevel::kScalar)
          benchmark::RegisterBenchmark(("prefill" + sfx).c_str(), BM_gemm, t, lv, k, 256, 128)->Unit(benchmark::kMillisecond);
      }
    }
    for (TensorType wt : {TensorType::Q8_0, TensorType::Q4_1, TensorType::Q4_K, TensorType::F16})
      benchmark::RegisterBenchmark(("quantize_act/" + std::string(minfer::type_name(minfer::type_traits(wt).vec_dot_type)) +
                                    "/" + ln + "/4864").c_str(),
                                   BM_quantize_act, wt, lv, int64_t{4864});
  }
  return 0;
}

const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
