// Device matrix products against the CPU reference matmul on the same inputs, for every weight
// type x n in {1,2,3,4,5,8,9,17,64,300} x m in {1, 7, 33, 4864} x k (one block, many blocks):
// bit-identical (every output's bits) for n <= 8, within the prefill GEMM's error bound for
// n > 8. Outputs are poisoned before each run: every output must be written, and the rows of
// the ldy padding must not be. Skips without a CUDA device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.cuh"
#include "quant/quant.h"
#include "cuda_matmul_util.h"

namespace minfer {
namespace {

using test::DeviceBuffer;

constexpr uint32_t kPoison = 0xFFFFFFFFu;  // a NaN no kernel produces from finite inputs
constexpr int64_t kNs[] = {1, 2, 3, 4, 5, 8, 9, 17, 64, 300};
constexpr int64_t kMaxN = 300;
constexpr int64_t kMs[] = {1, 7, 33, 4864};
constexpr int64_t kPad = 3;  // ldy = m + kPad
/// Prefill bound, in units of 2^-24 * sum of part magnitudes |w| |a| (see prefill_tolerance).
constexpr double kPrefillSlack = 1.5;

/// k values: one block and many blocks (more than 32 blocks, so lanes wrap, and more than one
/// staged chunk); for the float types also a k that is not a multiple of 8 (scalar path).
std::vector<int64_t> ks_for(TensorType type) {
  switch (type) {
    case TensorType::F32:
    case TensorType::F16:
    case TensorType::BF16: return {1, 999, 1024};
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K: return {256, 256 * 37, 256 * 14};  // 14: two steps of the direct kernels
    default: return {32, 32 * 100};
  }
}

int64_t terms_per_row(TensorType type, int64_t k) {
  return k / static_cast<int64_t>(type_traits(type).block_size);
}

/// |gpu - cpu| bound for the prefill GEMM: its own error (32 + k/32) u sum|w a| plus the CPU's
/// (ceil(terms/32) + 9) u sum(part magnitudes) plus 2u sum|w a| for the rounding of the
/// dequantized operands (docs/cuda-matmul.md), all <= part magnitudes, times a slack factor.
double prefill_tolerance(TensorType type, int64_t k, double part_mag_sum) {
  const double u = std::ldexp(1.0, -24);
  const int64_t terms = terms_per_row(type, k);
  const double units = 32.0 + static_cast<double>((k + 31) / 32) + 2.0 +
                       static_cast<double>((terms + 31) / 32) + 9.0;
  return kPrefillSlack * u * units * part_mag_sum + 1e-30;
}

struct Case {
  TensorType type;
  int64_t m, k;
  size_t w_offset = 0;  // byte offset of W from a 256-aligned allocation
  size_t x_offset = 0;
};

class CudaMatmul : public test::CudaStreamTest<TensorType> {
 protected:

  /// Runs every n of `ns` for one (type, m, k) and compares with the CPU; stops after the first
  /// failing n (its details reported).
  void run_case(const Case& c, const std::vector<int64_t>& ns, uint32_t seed);

  ThreadPool pool_{default_thread_count()};
};

std::string describe(const Case& c, int64_t n) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "type %s m %lld k %lld n %lld (W offset %zu, x offset %zu)",
                std::string(type_name(c.type)).c_str(), static_cast<long long>(c.m),
                static_cast<long long>(c.k), static_cast<long long>(n), c.w_offset, c.x_offset);
  return buf;
}

void CudaMatmul::run_case(const Case& c, const std::vector<int64_t>& ns, uint32_t seed) {
  const int64_t n_max = *std::max_element(ns.begin(), ns.end());
  const auto w = test::random_weights(c.type, c.m, c.k, seed);
  const auto x = test::random_acts(c.k, n_max, seed + 1);
  std::vector<uint8_t> act_buf;
  const auto y_ref = test::cpu_matmul(pool_, c.type, w, c.m, x, c.k, n_max, &act_buf);

  // Part magnitudes sum_e |w|_parts |a| per output (only needed for the prefill bound).
  std::vector<double> mag;
  if (n_max > 8) {
    const auto wm = test::weight_part_magnitudes(c.type, w, c.m, c.k);
    const cpu::QuantizedActs xq = cpu::quantize_activations(pool_, act_buf, c.type, x.data(), c.k, n_max);
    const auto am = test::act_magnitudes(c.type, xq, x);
    mag.assign(static_cast<size_t>(c.m * n_max), 0.0);
    pool_.parallel_for(c.m, 1, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j)
        for (int64_t t = 0; t < n_max; ++t) {
          double s = 0.0;
          const float* wr = wm.data() + j * c.k;
          const float* ar = am.data() + t * c.k;
          for (int64_t e = 0; e < c.k; ++e) s += static_cast<double>(wr[e]) * ar[e];
          mag[static_cast<size_t>(j + t * c.m)] = s;
        }
    });
  }

  DeviceBuffer dw(w.size(), c.w_offset);
  DeviceBuffer dx(x.size() * 4, c.x_offset);
  dw.upload(w.data(), w.size());
  dx.upload(x.data(), x.size() * 4);

  for (const int64_t n : ns) {
    SCOPED_TRACE(describe(c, n));
    const int64_t ldy = c.m + kPad;
    DeviceBuffer dy(static_cast<size_t>(ldy * n) * 4);
    dy.fill(0xFF);
    const size_t qbytes = cuda::quantized_activation_bytes(c.type, c.k, n);
    DeviceBuffer dq(std::max<size_t>(qbytes, 16));
    cuda::clear_launch_failure();
    ASSERT_TRUE(cuda::quantize_activations(c.type, dx.as<float>(), c.k, n, dq.get(), stream_));
    ASSERT_TRUE(cuda::matmul(c.type, dw.get(), c.k, c.m, dx.as<float>(), dq.get(), n, dy.as<float>(),
                             ldy, stream_));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<float> y(static_cast<size_t>(ldy * n));
    dy.download(y.data(), y.size() * 4);

    int64_t unwritten = 0, pad_written = 0, bad = 0, first_bad = -1;
    double max_diff = 0.0;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t j = c.m; j < ldy; ++j) pad_written += test::f32_bits(y[static_cast<size_t>(j + t * ldy)]) != kPoison;
      for (int64_t j = 0; j < c.m; ++j) {
        const float got = y[static_cast<size_t>(j + t * ldy)];
        const float want = y_ref[static_cast<size_t>(j + t * c.m)];
        if (test::f32_bits(got) == kPoison) {
          ++unwritten;
          continue;
        }
        const double diff = std::fabs(static_cast<double>(got) - want);
        max_diff = std::max(max_diff, diff);
        const bool ok = n <= 8 ? test::f32_bits(got) == test::f32_bits(want)
                               : diff <= prefill_tolerance(c.type, c.k, mag[static_cast<size_t>(j + t * c.m)]);
        if (!ok && bad++ == 0) {
          first_bad = j + t * c.m;
          ADD_FAILURE() << "first mismatch at row " << j << " token " << t << ": device " << got
                        << " (0x" << std::hex << test::f32_bits(got) << ") vs CPU " << want << " (0x"
                        << test::f32_bits(want) << std::dec << ")"
                        << (n > 8 ? " tolerance " + std::to_string(prefill_tolerance(c.type, c.k, mag[static_cast<size_t>(j + t * c.m)])) : "");
        }
      }
    }
    EXPECT_EQ(unwritten, 0) << "outputs never written";
    EXPECT_EQ(pad_written, 0) << "rows of the ldy padding written";
    EXPECT_EQ(bad, 0) << bad << " of " << c.m * n << " outputs differ (first at flat index "
                      << first_bad << "), max |d| " << max_diff
                      << (n <= 8 ? " (bit-identity expected)" : " (prefill tolerance)");
    if (unwritten != 0 || pad_written != 0 || bad != 0) return;
  }
}

TEST_P(CudaMatmul, matches_cpu_reference_for_every_n_m_k) {
  const TensorType type = GetParam();
  uint32_t seed = 1000 + static_cast<uint32_t>(type) * 97;
  for (const int64_t m : kMs)
    for (const int64_t k : ks_for(type)) {
      run_case({type, m, k}, std::vector<int64_t>(std::begin(kNs), std::end(kNs)), seed++);
      if (HasFailure()) return;
    }
}

TEST_P(CudaMatmul, misaligned_weights_and_activations_give_the_same_results) {
  // W only 2-byte aligned (4 for F32): the staged loads read partial words at the tensor's
  // edges and the float kernels take their scalar path; x 4-byte aligned (F32 scalar path).
  const TensorType type = GetParam();
  const size_t w_off = type == TensorType::F32 ? 4 : 2;
  const int64_t k = ks_for(type)[1];
  run_case({type, 33, k, w_off, 4}, {1, 3, 8, 17}, 77);
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, CudaMatmul,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16,
                                           TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                           TensorType::Q5_1, TensorType::Q8_0, TensorType::Q4_K,
                                           TensorType::Q5_K, TensorType::Q6_K),
                         test::type_param_name);

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
