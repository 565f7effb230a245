// matmul_fused for prefill token counts (n > 8): up to three outputs of one weight type in ONE
// MMQ grid with the bias and residual adds in its epilogue (matmul.cuh). Claim: the bytes equal
// matmul() of each output (the MMQ product) followed by the separate adds (bias, then residual,
// each rounded once), for every quantized type, every token tile (32, 64, 128: forced with
// MINFER_CUDA_MMQ_TILE) and row counts whose tiles straddle the outputs; every output is
// written and the ldy padding is not. Skips without a CUDA device.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernels/launch.cuh"
#include "cuda/kernels/matmul.cuh"
#include "cuda/kernels/mmq.cuh"
#include "cuda_matmul_util.h"
#include "cuda_test_util.h"

namespace minfer {
namespace {

using test::DeviceBuffer;

constexpr int64_t kPad = 5;  // ldy = m + kPad
constexpr uint8_t kPoisonByte = 0xFF;

class CudaMatmulFusedPrefill : public test::CudaStreamTest<TensorType> {
 protected:
  std::vector<float> download(const float* p, size_t count) {
    std::vector<float> v(count);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(v.data(), p, count * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

TEST_P(CudaMatmulFusedPrefill, one_grid_equals_matmul_then_the_adds_for_every_tile) {
  const TensorType type = GetParam();
  const bool kq = type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
  const int64_t k = kq ? 256 * 3 : 32 * 13;
  const int64_t ms[3] = {37, 200, 130};  // tiles of 128 rows straddle the outputs
  for (const int64_t n : {9, 77, 300}) {
    const auto x = test::random_acts(k, n, 500 + static_cast<uint32_t>(n));
    DeviceBuffer dx(x.size() * 4);
    dx.upload(x.data(), x.size() * 4);
    DeviceBuffer dq(cuda::quantized_activation_bytes(type, k, n));
    ASSERT_TRUE(cuda::quantize_activations(type, dx.as<float>(), k, n, dq.get(), stream_));

    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    auto make = [&](size_t bytes) { return bufs.emplace_back(std::make_unique<DeviceBuffer>(bytes)).get(); };
    cuda::MatmulOut outs[3];
    std::vector<std::vector<float>> bias(3), res(3);
    for (int s = 0; s < 3; ++s) {
      const int64_t m = ms[s];
      const auto w = test::random_weights(type, m, k, 510 + static_cast<uint32_t>(s));
      bias[s] = test::random_acts(m, 1, 520 + static_cast<uint32_t>(s));
      res[s] = test::random_acts(m, n, 530 + static_cast<uint32_t>(s));
      const bool with_bias = s != 1, with_res = s != 0;  // 0: bias, 1: residual, 2: both
      DeviceBuffer* dw = make(w.size());
      dw->upload(w.data(), w.size());
      DeviceBuffer* db = make(bias[s].size() * 4);
      db->upload(bias[s].data(), bias[s].size() * 4);
      DeviceBuffer* dr = make(res[s].size() * 4);
      dr->upload(res[s].data(), res[s].size() * 4);
      outs[s].w = dw->get();
      outs[s].m = m;
      outs[s].y = make(static_cast<size_t>((m + kPad) * n) * 4)->as<float>();
      outs[s].ldy = m + kPad;
      outs[s].bias = with_bias ? db->as<float>() : nullptr;
      outs[s].residual = with_res ? dr->as<float>() : nullptr;
      outs[s].ldr = m;
    }
    ASSERT_TRUE(cuda::matmul_fused_serves(type, k, outs, 3, n));
    for (const char* tile : {"32", "64", "128"}) {
      SCOPED_TRACE(std::string(type_name(type)) + " n " + std::to_string(n) + " tile " + tile);
      test::ScopedEnv force("MINFER_CUDA_MMQ_TILE", tile);
      for (int s = 0; s < 3; ++s)
        ASSERT_EQ(cudaMemset(outs[s].y, kPoisonByte, static_cast<size_t>((ms[s] + kPad) * n) * 4), cudaSuccess);
      cuda::clear_launch_failure();
      ASSERT_TRUE(cuda::matmul_fused(type, k, outs, 3, dq.get(), n, stream_));
      for (int s = 0; s < 3; ++s) {
        const int64_t m = ms[s], ldy = m + kPad;
        const auto got = download(outs[s].y, static_cast<size_t>(ldy * n));
        DeviceBuffer* plain = make(static_cast<size_t>(m * n) * 4);
        ASSERT_TRUE(cuda::matmul(type, outs[s].w, k, m, dx.as<float>(), dq.get(), n, plain->as<float>(), m, stream_));
        const auto prod = download(plain->as<float>(), static_cast<size_t>(m * n));
        int64_t differ = 0, pad_written = 0, first = -1;
        for (int64_t t = 0; t < n; ++t) {
          for (int64_t j = m; j < ldy; ++j) {
            uint32_t bits;
            std::memcpy(&bits, &got[static_cast<size_t>(j + t * ldy)], 4);
            pad_written += bits != 0xFFFFFFFFu;
          }
          for (int64_t j = 0; j < m; ++j) {
            float want = prod[static_cast<size_t>(j + t * m)];
            if (outs[s].bias != nullptr) want = want + bias[s][static_cast<size_t>(j)];
            if (outs[s].residual != nullptr) want = res[s][static_cast<size_t>(j + t * m)] + want;
            const float g = got[static_cast<size_t>(j + t * ldy)];
            if (std::memcmp(&g, &want, 4) != 0 && differ++ == 0) first = j + t * m;
          }
        }
        EXPECT_EQ(pad_written, 0) << "output " << s;
        EXPECT_EQ(differ, 0) << "output " << s << ": first at row " << (first < 0 ? -1 : first % m) << " token "
                             << (first < 0 ? -1 : first / m);
      }
    }
  }
}

TEST_P(CudaMatmulFusedPrefill, is_refused_without_mmq_or_with_malformed_outputs) {
  const TensorType type = GetParam();
  const int64_t k = 256, n = 16;
  DeviceBuffer dq(cuda::quantized_activation_bytes(type, k, n)), dw(row_bytes(type, k) * 8 + 16),
      dy(static_cast<size_t>(8 * n) * 4);
  cuda::MatmulOut o;
  o.w = dw.get();
  o.m = 8;
  o.y = dy.as<float>();
  o.ldy = 8;
  EXPECT_TRUE(cuda::matmul_fused_serves(type, k, &o, 1, n));
  {
    test::ScopedEnv gate("MINFER_NO_MMQ", "1");
    EXPECT_FALSE(cuda::matmul_fused_serves(type, k, &o, 1, n)) << "MINFER_NO_MMQ=1 leaves n > 8 to matmul()";
    cuda::clear_launch_failure();
    EXPECT_FALSE(cuda::matmul_fused(type, k, &o, 1, dq.get(), n, stream_));
    ASSERT_NE(cuda::launch_failure(), nullptr);
    EXPECT_STREQ(cuda::launch_failure()->site, "matmul_fused_bad_args");
  }
  cuda::MatmulOut bad = o;
  bad.w = static_cast<const uint8_t*>(dw.get()) + 2;  // MMQ stages 16-byte words
  EXPECT_FALSE(cuda::matmul_fused_serves(type, k, &bad, 1, n));
  bad = o;
  bad.ldy = 7;  // < m
  cuda::clear_launch_failure();
  EXPECT_FALSE(cuda::matmul_fused(type, k, &bad, 1, dq.get(), n, stream_));
  ASSERT_NE(cuda::launch_failure(), nullptr);
  EXPECT_STREQ(cuda::launch_failure()->site, "matmul_fused_bad_args");
  cuda::clear_launch_failure();
  EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
}

INSTANTIATE_TEST_SUITE_P(QuantizedTypes, CudaMatmulFusedPrefill,
                         ::testing::Values(TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                           TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         test::type_param_name);

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
