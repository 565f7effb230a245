// Device activation quantization against the CPU quantizers (byte for byte, edge cases
// included), the non-finite policy, and the matmul API's argument checks. The argument and
// support checks run without a device; the rest skips without one.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.cuh"
#include "cuda_matmul_util.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using test::DeviceBuffer;

const TensorType kAllTypes[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                TensorType::Q5_1, TensorType::Q8_0, TensorType::Q4_K,
                                TensorType::Q5_K, TensorType::Q6_K};

TEST(CudaMatmulApi, supports_every_type_at_its_block_multiples_only) {
  for (const TensorType t : kAllTypes) {
    SCOPED_TRACE(std::string(type_name(t)));
    const int64_t bs = static_cast<int64_t>(type_traits(t).block_size);
    const char* why = nullptr;
    EXPECT_TRUE(cuda::matmul_supported(t, bs, &why));
    EXPECT_TRUE(cuda::matmul_supported(t, 74 * bs, &why));
    EXPECT_FALSE(cuda::matmul_supported(t, 0, &why));
    ASSERT_NE(why, nullptr);
    EXPECT_NE(std::string(why).find("row length"), std::string::npos) << why;
    if (bs > 1) {
      why = nullptr;
      EXPECT_FALSE(cuda::matmul_supported(t, bs + bs / 2, &why));
      ASSERT_NE(why, nullptr);
      EXPECT_NE(std::string(why).find(std::to_string(bs)), std::string::npos) << why;
    }
  }
  const char* why = nullptr;
  EXPECT_FALSE(cuda::matmul_supported(TensorType::Q2_K, 256, &why));
  ASSERT_NE(why, nullptr);
  EXPECT_NE(std::string(why).find("no matmul kernel"), std::string::npos) << why;
}

TEST(CudaMatmulApi, quantized_activation_bytes_are_zero_only_for_f32_and_unsupported) {
  EXPECT_EQ(cuda::quantized_activation_bytes(TensorType::F32, 1024, 4), 0u);
  EXPECT_EQ(cuda::quantized_activation_bytes(TensorType::Q4_0, 1000, 4), 0u);  // k % 32 != 0
  EXPECT_EQ(cuda::quantized_activation_bytes(TensorType::Q2_K, 1024, 4), 0u);
  for (const TensorType t : kAllTypes) {
    if (t == TensorType::F32) continue;
    SCOPED_TRACE(std::string(type_name(t)));
    const size_t b1 = cuda::quantized_activation_bytes(t, 2048, 1);
    const size_t b8 = cuda::quantized_activation_bytes(t, 2048, 8);
    // At least the CPU's bytes of the same activations (the device planes hold the same numbers).
    EXPECT_GE(b1, row_bytes(type_traits(t).vec_dot_type, 2048));
    EXPECT_GE(b8, 8 * row_bytes(type_traits(t).vec_dot_type, 2048));
    EXPECT_EQ(b8 % 256, 0u);
  }
}

TEST(CudaMatmulApi, bad_arguments_launch_nothing_and_name_the_site) {
  alignas(16) static float dummy[64];
  float* p = dummy;  // never dereferenced: every call below is rejected before any launch
  cuda::clear_launch_failure();
  EXPECT_FALSE(cuda::matmul(TensorType::Q4_0, p, 48, 4, p, p, 1, p, 4, nullptr));  // k % 32
  ASSERT_NE(cuda::launch_failure(), nullptr);
  EXPECT_STREQ(cuda::launch_failure()->site, "matmul_bad_args");
  EXPECT_EQ(cuda::launch_failure()->err, cudaErrorInvalidValue);

  cuda::clear_launch_failure();
  EXPECT_FALSE(cuda::matmul(TensorType::Q4_K, p, 256, 8, p, p, 1, p, 7, nullptr));  // ldy < m
  ASSERT_NE(cuda::launch_failure(), nullptr);
  EXPECT_STREQ(cuda::launch_failure()->site, "matmul_bad_args");

  cuda::clear_launch_failure();
  auto* odd = reinterpret_cast<uint8_t*>(dummy) + 8;  // not 16-byte aligned
  EXPECT_FALSE(cuda::quantize_activations(TensorType::Q8_0, p, 32, 1, odd, nullptr));
  ASSERT_NE(cuda::launch_failure(), nullptr);
  EXPECT_STREQ(cuda::launch_failure()->site, "quantize_activations_bad_args");
  cuda::clear_launch_failure();

  // Nothing to do is not an error.
  EXPECT_TRUE(cuda::matmul(TensorType::Q4_0, p, 32, 0, p, p, 1, p, 1, nullptr));
  EXPECT_TRUE(cuda::quantize_activations(TensorType::F32, p, 7, 3, nullptr, nullptr));
  EXPECT_EQ(cuda::launch_failure(), nullptr);
}

/// x [k, 3] with the quantizers' edge cases (k = 1024: 32 blocks, 4 super-blocks).
/// Column 0: normal values; column 1: special blocks; column 2: all zeros.
std::vector<float> edge_case_acts(int64_t k) {
  std::vector<float> x = test::random_acts(k, 3, 5);
  float* c1 = x.data() + k;
  for (int64_t e = 0; e < k; ++e) c1[e] = 0.01f * static_cast<float>((e * 37) % 23 - 11);
  // block 0: all zero.
  for (int e = 0; e < 32; ++e) c1[e] = 0.0f;
  // block 2 (super-block 0): max 127 -> Q8_0 d = 1 (ties round away); Q8_K xm = 127 -> iscale
  // = -1 (ties round to even).
  c1[64] = 127.0f;
  c1[65] = 2.5f;
  c1[66] = -2.5f;
  c1[67] = 0.5f;
  c1[68] = 1.5f;
  c1[69] = -126.5f;
  // block 3: subnormal magnitudes (Q8_0 1 / d overflows to inf).
  c1[96] = 1e-39f;
  c1[97] = -3e-39f;
  // super-block 1: two elements of the largest magnitude, opposite signs: the first wins.
  c1[260] = -5.0f;
  c1[300] = 5.0f;
  // block 12 (super-block 1): large values.
  for (int e = 384; e < 416; ++e) c1[e] = 1e4f * static_cast<float>(e % 7 - 3);
  // super-block 3: every |x| below 2^-120 (Q8_K iscale is infinite, d = 0).
  for (int64_t e = 768; e < k; ++e) c1[e] = ((e % 3) - 1) * 1e-38f;
  float* c2 = x.data() + 2 * k;
  for (int64_t e = 0; e < k; ++e) c2[e] = 0.0f;
  return x;
}

/// Quantizes x [k, n] with quantize_activations (buffer poisoned first) and the CPU quantizer
/// and compares the device's bytes, converted to the CPU layout, with the CPU's.
void expect_device_bytes_match_cpu(ThreadPool& pool, TensorType type, const std::vector<float>& x, int64_t k,
                                   int64_t n) {
  std::vector<uint8_t> cpu_buf;
  const cpu::QuantizedActs xq = cpu::quantize_activations(pool, cpu_buf, type, x.data(), k, n);
  DeviceBuffer dx(x.size() * 4);
  dx.upload(x.data(), x.size() * 4);
  DeviceBuffer dq(cuda::quantized_activation_bytes(type, k, n));
  dq.fill(0xA5);
  ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, n, dq.get(), nullptr));
  std::vector<uint8_t> dev(xq.row_bytes * static_cast<size_t>(n));
  ASSERT_TRUE(cuda::quantized_activations_to_host(type, dq.get(), k, n, dev.data(), nullptr));

  std::vector<uint8_t> want(xq.data, xq.data + dev.size());
  if (xq.type == TensorType::Q8_1)  // s is not kept on the device (written back as 0)
    for (size_t b = 0; b < want.size() / sizeof(block_q8_1); ++b)
      std::memset(want.data() + b * sizeof(block_q8_1) + offsetof(block_q8_1, s), 0, 2);
  size_t first = want.size();
  for (size_t i = 0; i < want.size(); ++i)
    if (want[i] != dev[i]) {
      first = i;
      break;
    }
  EXPECT_EQ(first, want.size()) << std::string(type_name(xq.type)) << " activations differ first at byte " << first
                                << " (token " << first / xq.row_bytes << ", byte " << first % xq.row_bytes
                                << " of its row): device " << int(dev[first < dev.size() ? first : 0]) << " CPU "
                                << int(want[first < want.size() ? first : 0]);
}

class CudaQuantizeActs : public ::testing::TestWithParam<TensorType> {
 protected:
  void SetUp() override {
    if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  }
  ThreadPool pool_{4};
};

TEST_P(CudaQuantizeActs, bytes_match_the_cpu_quantizer) {
  const TensorType type = GetParam();
  const bool is_float = type == TensorType::F16 || type == TensorType::BF16;
  for (const int64_t k : is_float ? std::vector<int64_t>{1000, 1024} : std::vector<int64_t>{1024}) {
    SCOPED_TRACE("k " + std::to_string(k));
    std::vector<float> x = edge_case_acts(k);
    if (is_float) {  // the conversions keep NaN (payload bits included), inf and overflow
      x[5] = std::numeric_limits<float>::quiet_NaN();
      x[6] = -std::numeric_limits<float>::infinity();
      x[7] = 1e5f;
      const uint32_t payload_nan = 0x7FA12345u;
      std::memcpy(&x[8], &payload_nan, 4);
    }
    expect_device_bytes_match_cpu(pool_, type, x, k, 3);
  }
}

INSTANTIATE_TEST_SUITE_P(ActivationFormats, CudaQuantizeActs,
                         ::testing::Values(TensorType::F16, TensorType::BF16, TensorType::Q4_0,
                                           TensorType::Q4_1, TensorType::Q4_K),
                         test::type_param_name);

TEST(CudaQuantizeActsDecode, bytes_match_the_cpu_quantizer_at_decode_row_lengths) {
  // Decode shapes: 1-3 token rows of the hidden size (3584) and the FFN size (18944) of a 7B
  // model; at n = 1, 4864 (19 super-blocks) and 3616 (113 Q8 blocks) leave the last 64-thread
  // block partly idle.
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  ThreadPool pool(4);
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_1, TensorType::Q4_K})
    for (const int64_t k : {int64_t{3584}, int64_t{3616}, int64_t{4864}, int64_t{18944}}) {
      if (k % type_traits(type).block_size != 0) continue;  // Q4_K: 3616 is not whole super-blocks
      for (int64_t n = 1; n <= 3; ++n) {
        SCOPED_TRACE(std::string(type_name(type)) + " k " + std::to_string(k) + " n " + std::to_string(n));
        expect_device_bytes_match_cpu(pool, type, test::random_acts(k, n, 40 + static_cast<uint32_t>(n)), k, n);
      }
    }
}

TEST(CudaQuantizeActsPolicy, one_buffer_serves_every_type_of_a_family) {
  // Documented in matmul.cuh: Q8_0 and Q8_1 activations share d and qs, so a buffer quantized
  // for Q8_0 weights feeds Q4_1 / Q5_1 weights; likewise Q4_K's buffer feeds Q6_K.
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  ThreadPool pool(2);
  const int64_t k = 512, m = 9, n = 3;
  const std::vector<float> x = test::random_acts(k, n, 21);
  DeviceBuffer dx(x.size() * 4);
  dx.upload(x.data(), x.size() * 4);
  const std::pair<TensorType, TensorType> pairs[] = {{TensorType::Q8_0, TensorType::Q4_1},
                                                     {TensorType::Q4_0, TensorType::Q5_1},
                                                     {TensorType::Q4_K, TensorType::Q6_K}};
  for (const auto& [quantized_for, used_by] : pairs) {
    SCOPED_TRACE(std::string(type_name(quantized_for)) + " buffer, " + std::string(type_name(used_by)) + " weights");
    ASSERT_EQ(cuda::quantized_activation_bytes(quantized_for, k, n), cuda::quantized_activation_bytes(used_by, k, n));
    DeviceBuffer dq(cuda::quantized_activation_bytes(quantized_for, k, n));
    ASSERT_TRUE(cuda::quantize_activations(quantized_for, dx.as<float>(), k, n, dq.get(), nullptr));
    const auto w = test::random_weights(used_by, m, k, 8);
    std::vector<uint8_t> buf;
    const auto want = test::cpu_matmul(pool, used_by, w, m, x, k, n, &buf);
    DeviceBuffer dw(w.size()), dy(static_cast<size_t>(m * n) * 4);
    dw.upload(w.data(), w.size());
    ASSERT_TRUE(cuda::matmul(used_by, dw.get(), k, m, dx.as<float>(), dq.get(), n, dy.as<float>(), m, nullptr));
    std::vector<float> y(static_cast<size_t>(m * n));
    dy.download(y.data(), y.size() * 4);
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(test::f32_bits(y[i]), test::f32_bits(want[i])) << "output " << i << ": " << y[i] << " vs CPU " << want[i];
  }
}

TEST(CudaQuantizeActsPolicy, non_finite_input_gives_nan_outputs_where_the_cpu_throws) {
  if (!test::cuda_device_present()) GTEST_SKIP() << "no CUDA device";
  ThreadPool pool(2);
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_1, TensorType::Q6_K}) {
    SCOPED_TRACE(std::string(type_name(type)));
    const int64_t k = 512, m = 5;
    for (const int64_t n : {int64_t{2}, int64_t{9}}) {
      std::vector<float> x = test::random_acts(k, n, 9);
      x[static_cast<size_t>(k + 300)] = std::numeric_limits<float>::infinity();  // token 1 only
      std::vector<uint8_t> buf;
      EXPECT_THROW(cpu::quantize_activations(pool, buf, type, x.data(), k, n), Error);

      const auto w = test::random_weights(type, m, k, 3);
      DeviceBuffer dw(w.size()), dx(x.size() * 4), dy(static_cast<size_t>(m * n) * 4);
      dw.upload(w.data(), w.size());
      dx.upload(x.data(), x.size() * 4);
      DeviceBuffer dq(cuda::quantized_activation_bytes(type, k, n));
      ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, n, dq.get(), nullptr));
      ASSERT_TRUE(cuda::matmul(type, dw.get(), k, m, dx.as<float>(), dq.get(), n, dy.as<float>(), m, nullptr));
      std::vector<float> y(static_cast<size_t>(m * n));
      dy.download(y.data(), y.size() * 4);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = 0; j < m; ++j) {
          const float v = y[static_cast<size_t>(j + t * m)];
          if (t == 1) {
            EXPECT_TRUE(std::isnan(v)) << "n " << n << " row " << j << " token 1: " << v;
          } else {
            EXPECT_TRUE(std::isfinite(v)) << "n " << n << " row " << j << " token " << t << ": " << v;
          }
        }
    }
  }
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
