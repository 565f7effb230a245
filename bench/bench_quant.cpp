// Throughput of the reference (scalar) row kernels of src/quant for one 4096-element row per
// type: dequantize, quantize, and vec_dot (weight row x activation row in vec_dot_type).
// Items are elements; bytes are the packed row bytes of the type.
//   ./build/bench/bench_quant --benchmark_min_time=0.2
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace {

using minfer::TensorType;

constexpr int64_t kRow = 4096;

std::vector<float> gaussian_row(uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(kRow);
  for (auto& x : v) x = dist(gen);
  return v;
}

void set_counters(benchmark::State& state, TensorType type) {
  state.SetItemsProcessed(state.iterations() * kRow);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(minfer::row_bytes(type, kRow)));
}

void BM_dequantize(benchmark::State& state, TensorType type) {
  const auto& t = minfer::type_traits(type);
  const auto src = gaussian_row(1);
  std::vector<uint8_t> packed(minfer::row_bytes(type, kRow));
  t.quantize_row(src.data(), packed.data(), kRow);
  std::vector<float> out(kRow);
  for (auto _ : state) {
    t.dequantize_row(packed.data(), out.data(), kRow);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, type);
}

void BM_quantize(benchmark::State& state, TensorType type) {
  const auto& t = minfer::type_traits(type);
  const auto src = gaussian_row(2);
  std::vector<uint8_t> packed(minfer::row_bytes(type, kRow));
  for (auto _ : state) {
    t.quantize_row(src.data(), packed.data(), kRow);
    benchmark::DoNotOptimize(packed.data());
    benchmark::ClobberMemory();
  }
  set_counters(state, type);
}

void BM_vec_dot(benchmark::State& state, TensorType type) {
  const auto& t = minfer::type_traits(type);
  const auto& act = minfer::type_traits(t.vec_dot_type);
  const auto w = gaussian_row(3);
  const auto a = gaussian_row(4);
  std::vector<uint8_t> wq(minfer::row_bytes(type, kRow));
  std::vector<uint8_t> aq(minfer::row_bytes(act.type, kRow));
  t.quantize_row(w.data(), wq.data(), kRow);
  act.quantize_row(a.data(), aq.data(), kRow);
  for (auto _ : state) {
    float r = t.vec_dot(kRow, wq.data(), aq.data());
    benchmark::DoNotOptimize(r);
  }
  set_counters(state, type);
}

#define MINFER_BENCH_WEIGHT_TYPE(T)                                    \
  BENCHMARK_CAPTURE(BM_dequantize, T, TensorType::T);                  \
  BENCHMARK_CAPTURE(BM_quantize, T, TensorType::T);                    \
  BENCHMARK_CAPTURE(BM_vec_dot, T, TensorType::T)

MINFER_BENCH_WEIGHT_TYPE(F32);
MINFER_BENCH_WEIGHT_TYPE(F16);
MINFER_BENCH_WEIGHT_TYPE(BF16);
MINFER_BENCH_WEIGHT_TYPE(Q4_0);
MINFER_BENCH_WEIGHT_TYPE(Q4_1);
MINFER_BENCH_WEIGHT_TYPE(Q5_0);
MINFER_BENCH_WEIGHT_TYPE(Q5_1);
MINFER_BENCH_WEIGHT_TYPE(Q8_0);
MINFER_BENCH_WEIGHT_TYPE(Q4_K);
MINFER_BENCH_WEIGHT_TYPE(Q5_K);
MINFER_BENCH_WEIGHT_TYPE(Q6_K);
// Activation types: no vec_dot of their own.
BENCHMARK_CAPTURE(BM_dequantize, Q8_1, TensorType::Q8_1);
BENCHMARK_CAPTURE(BM_quantize, Q8_1, TensorType::Q8_1);
BENCHMARK_CAPTURE(BM_dequantize, Q8_K, TensorType::Q8_K);
BENCHMARK_CAPTURE(BM_quantize, Q8_K, TensorType::Q8_K);

}  // namespace

BENCHMARK_MAIN();
