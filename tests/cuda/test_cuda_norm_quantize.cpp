// The fused RMS norm + activation quantization (norm_quantize.cuh): byte for byte the device's
// rms_norm() followed by quantize_activations(), for Q8 and Q8K activation types, Qwen row
// lengths, 1..8 token rows and the edge rows (all zero, a NaN, a huge value), with the whole
// buffer poisoned first so that bytes the chain leaves alone must stay alone; plus the argument
// checks. The support checks run without a device; the rest skips without one.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.cuh"
#include "cuda/kernels/norm.cuh"
#include "cuda/kernels/norm_quantize.cuh"
#include "cuda_matmul_util.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using test::DeviceBuffer;

constexpr float kEps = 1e-6f;

TEST(CudaNormQuantizeSupport, quantized_activation_types_at_block_multiples_up_to_the_limit) {
  EXPECT_TRUE(cuda::rms_norm_quantize_supported(TensorType::Q4_K, 1536));
  EXPECT_TRUE(cuda::rms_norm_quantize_supported(TensorType::Q6_K, 3584));
  EXPECT_TRUE(cuda::rms_norm_quantize_supported(TensorType::Q8_0, 896));
  EXPECT_TRUE(cuda::rms_norm_quantize_supported(TensorType::Q4_0, cuda::kNormQuantizeMaxK));
  EXPECT_FALSE(cuda::rms_norm_quantize_supported(TensorType::Q4_K, 896)) << "not a multiple of 256";
  EXPECT_FALSE(cuda::rms_norm_quantize_supported(TensorType::Q8_0, 48)) << "not a multiple of 32";
  EXPECT_FALSE(cuda::rms_norm_quantize_supported(TensorType::Q8_0, cuda::kNormQuantizeMaxK + 32));
  EXPECT_FALSE(cuda::rms_norm_quantize_supported(TensorType::F16, 1536)) << "reads f16, not quantized";
  EXPECT_FALSE(cuda::rms_norm_quantize_supported(TensorType::F32, 1536));
}

struct Case {
  TensorType type;
  int64_t k;
};

class CudaNormQuantize : public test::CudaStreamTest<Case> {
 protected:
};

TEST_P(CudaNormQuantize, one_launch_writes_the_bytes_of_rms_norm_then_quantize) {
  const auto [type, k] = GetParam();
  for (int64_t n : {1, 3, 8}) {
    SCOPED_TRACE(std::string(type_name(type)) + " k " + std::to_string(k) + " n " + std::to_string(n));
    auto x = test::random_acts(k, n, 700 + static_cast<uint32_t>(n));
    const auto w = test::random_acts(k, 1, 710);
    if (n >= 3) {
      for (int64_t e = 0; e < k; ++e) x[static_cast<size_t>(k + e)] = 0.0f;  // row 1: all zero
      x[static_cast<size_t>(2 * k + k / 2)] = std::numeric_limits<float>::quiet_NaN();  // row 2: a NaN
    }
    if (n == 8) x[static_cast<size_t>(7 * k + 5)] = 3.0e30f;  // row 7: squares overflow float
    const size_t bytes = cuda::quantized_activation_bytes(type, k, n);
    ASSERT_GT(bytes, 0u);
    DeviceBuffer dx(x.size() * 4), dw(w.size() * 4), dh(x.size() * 4), want(bytes), got(bytes);
    dx.upload(x.data(), x.size() * 4);
    dw.upload(w.data(), w.size() * 4);
    want.fill(0xA5);
    got.fill(0xA5);
    cuda::clear_launch_failure();
    ASSERT_TRUE(cuda::rms_norm(dx.as<float>(), dw.as<float>(), dh.as<float>(), k, n, kEps, "rms_norm", stream_));
    ASSERT_TRUE(cuda::quantize_activations(type, dh.as<float>(), k, n, want.get(), stream_));
    ASSERT_TRUE(cuda::rms_norm_quantize(type, dx.as<float>(), dw.as<float>(), k, n, kEps, got.get(), stream_));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<uint8_t> a(bytes), b(bytes);
    want.download(a.data(), bytes);
    got.download(b.data(), bytes);
    size_t diffs = 0, first = bytes;
    for (size_t i = 0; i < bytes; ++i)
      if (a[i] != b[i] && diffs++ == 0) first = i;
    EXPECT_EQ(diffs, 0u) << "bytes differ; first at byte " << first << " of " << bytes << ": fused "
                         << (first < bytes ? static_cast<int>(b[first]) : -1) << ", chain "
                         << (first < bytes ? static_cast<int>(a[first]) : -1)
                         << " (planes: qs at 0, d/ds and bsums after k * n rounded up to 256)";
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, CudaNormQuantize,
                         ::testing::Values(Case{TensorType::Q8_0, 896}, Case{TensorType::Q4_1, 1536},
                                           Case{TensorType::Q4_0, 3584}, Case{TensorType::Q8_0, 11264},
                                           Case{TensorType::Q4_K, 1536}, Case{TensorType::Q6_K, 3584},
                                           Case{TensorType::Q5_K, 5120}, Case{TensorType::Q4_K, 256}),
                         [](const ::testing::TestParamInfo<Case>& p) {
                           return std::string(type_name(p.param.type)) + "_k" + std::to_string(p.param.k);
                         });

TEST(CudaNormQuantizeArgs, refuses_unsupported_types_lengths_and_misaligned_buffers_without_launching) {
  MINFER_REQUIRE_CUDA_DEVICE();
  DeviceBuffer dx(1536 * 4 + 16), dw(1536 * 4), dq(cuda::quantized_activation_bytes(TensorType::Q4_K, 1536, 1) + 16);
  const auto expect_refused = [&](TensorType t, int64_t k, const void* x, void* q, const char* what) {
    cuda::clear_launch_failure();
    EXPECT_FALSE(cuda::rms_norm_quantize(t, static_cast<const float*>(x), dw.as<float>(), k, 1, kEps, q, nullptr))
        << what;
    ASSERT_NE(cuda::launch_failure(), nullptr) << what;
    EXPECT_STREQ(cuda::launch_failure()->site, "rms_norm_quantize_bad_args") << what;
  };
  expect_refused(TensorType::F16, 1536, dx.get(), dq.get(), "f16 weights");
  expect_refused(TensorType::Q4_K, 1000, dx.get(), dq.get(), "k not a multiple of 256");
  expect_refused(TensorType::Q4_K, 1536, dx.get(), dq.as<uint8_t>() + 8, "qx not 16-byte aligned");
  expect_refused(TensorType::Q4_K, 1536, dx.as<uint8_t>() + 2, dq.get(), "x not 4-byte aligned");
  cuda::clear_launch_failure();
  EXPECT_FALSE(cuda::rms_norm_quantize(TensorType::Q4_K, dx.as<float>(), dw.as<float>(), 1536, 0, kEps, dq.get(),
                                       nullptr))
      << "no token rows";
  cuda::clear_launch_failure();
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
