// The fused RMS norm + activation quantization (norm_quantize.cuh): byte for byte the device's
// rms_norm() followed by quantize_activations(), for Q8 and Q8K activation types, Qwen row
// lengths, 1..8 token rows and the edge rows (all zero, a NaN, a huge value), with the whole
// buffer poisoned first so that bytes the chain leaves alone must stay alone; the same bytes for
// every split of a row over blocks (even and uneven shares); the plan's split rule; plus the
// argument checks. The support and plan checks run without a device; the rest skips without one.
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
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

TEST(CudaNormQuantizePlan, shares_tile_the_row_in_order_and_differ_by_at_most_one_unit) {
  for (int units = 1; units <= 160; ++units)
    for (int parts = 1; parts <= units; ++parts) {
      int next = 0, smallest = units, largest = 0;
      for (int j = 0; j < parts; ++j) {
        const cuda::NormQuantizeShare s = cuda::norm_quantize_share(units, parts, j);
        ASSERT_EQ(s.begin, next) << "units " << units << " parts " << parts << " share " << j;
        ASSERT_GT(s.end, s.begin) << "units " << units << " parts " << parts << " share " << j << " is empty";
        smallest = std::min(smallest, s.end - s.begin);
        largest = std::max(largest, s.end - s.begin);
        next = s.end;
      }
      ASSERT_EQ(next, units) << "units " << units << " parts " << parts;
      ASSERT_LE(largest - smallest, 1) << "units " << units << " parts " << parts;
    }
}

TEST(CudaNormQuantizePlan, decode_rows_spread_over_blocks_and_prefill_rows_take_the_fewest) {
  // k = 3584, Q8K: 14 super-blocks, 896 threads (28 warps) per block; one token row asks for
  // kNormQuantizeWaveBlocks = 256 blocks, capped at one super-block per block.
  cuda::NormQuantizePlan p = cuda::norm_quantize_plan(TensorType::Q4_K, 3584, 1);
  EXPECT_EQ(p.threads, 896);
  EXPECT_EQ(p.units, 14);
  EXPECT_EQ(p.per_block, 28);
  EXPECT_EQ(p.min_parts, 1);
  EXPECT_EQ(p.max_parts, 14);
  EXPECT_EQ(p.parts, 14);
  EXPECT_EQ(cuda::norm_quantize_plan(TensorType::Q6_K, 3584, 32).parts, 8) << "256 / 32 blocks per row";
  EXPECT_EQ(cuda::norm_quantize_plan(TensorType::Q6_K, 3584, 512).parts, 1) << "prefill: one block per row";
  // k = 18944, Q8: 592 blocks, 1024 threads = 128 groups of 8 lanes: at least 5 blocks per row,
  // at most 74 (256 elements each).
  p = cuda::norm_quantize_plan(TensorType::Q8_0, 18944, 1);
  EXPECT_EQ(p.threads, 1024);
  EXPECT_EQ(p.units, 592);
  EXPECT_EQ(p.per_block, 128);
  EXPECT_EQ(p.min_parts, 5);
  EXPECT_EQ(p.max_parts, 74);
  EXPECT_EQ(p.parts, 74);
  EXPECT_EQ(cuda::norm_quantize_plan(TensorType::Q4_0, 18944, 2048).parts, 5) << "the fewest that cover the row";
  // k = 8448, Q8K: 33 super-blocks, 1024 threads = 32 warps: one block cannot cover the row.
  EXPECT_EQ(cuda::norm_quantize_plan(TensorType::Q5_K, 8448, 4096).parts, 2);
  EXPECT_EQ(cuda::norm_quantize_plan(TensorType::F16, 3584, 1).parts, 0) << "unsupported: an empty plan";
}

TEST(CudaNormQuantizePlan, every_share_fits_one_pass_of_its_block_for_every_supported_length) {
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_K})
    for (int64_t k = type == TensorType::Q8_0 ? 32 : 256; k <= cuda::kNormQuantizeMaxK; k += k < 4096 ? 32 : 96) {
      if (!cuda::rms_norm_quantize_supported(type, k)) continue;
      for (const int64_t n : {1, 2, 3, 8, 100, 5000}) {
        const cuda::NormQuantizePlan p = cuda::norm_quantize_plan(type, k, n);
        SCOPED_TRACE(std::string(type_name(type)) + " k " + std::to_string(k) + " n " + std::to_string(n));
        ASSERT_EQ(p.threads, cuda::rms_norm_threads(k)) << "the row sum's order depends on it";
        ASSERT_EQ(p.units, k / (type == TensorType::Q8_0 ? 32 : 256));
        ASSERT_GE(p.parts, 1);
        ASSERT_LE(p.min_parts, p.parts);
        ASSERT_LE(p.parts, p.max_parts);
        ASSERT_LE(p.max_parts, p.units) << "no empty share";
        ASSERT_LE((p.units + p.min_parts - 1) / p.min_parts, p.per_block) << "the largest share fits the block";
      }
    }
}

struct Case {
  TensorType type;
  int64_t k;
};

class CudaNormQuantize : public test::CudaStreamTest<Case> {
 protected:
  /// x [k, n] with the edge rows: row 1 all zero and row 2 a NaN (n >= 3), row 7 a value whose
  /// square overflows float (n == 8).
  static std::vector<float> edge_rows(int64_t k, int64_t n) {
    auto x = test::random_acts(k, n, 700 + static_cast<uint32_t>(n));
    if (n >= 3) {
      for (int64_t e = 0; e < k; ++e) x[static_cast<size_t>(k + e)] = 0.0f;
      x[static_cast<size_t>(2 * k + k / 2)] = std::numeric_limits<float>::quiet_NaN();
    }
    if (n == 8) x[static_cast<size_t>(7 * k + 5)] = 3.0e30f;
    return x;
  }

  /// Uploads x and w and keeps the bytes of rms_norm() then quantize_activations() in want_
  /// (the buffer poisoned with 0xA5 first).
  void run_chain(TensorType type, int64_t k, int64_t n, const std::vector<float>& x, const std::vector<float>& w) {
    bytes_ = cuda::quantized_activation_bytes(type, k, n);
    ASSERT_GT(bytes_, 0u);
    dx_ = std::make_unique<DeviceBuffer>(x.size() * 4);
    dw_ = std::make_unique<DeviceBuffer>(w.size() * 4);
    dx_->upload(x.data(), x.size() * 4);
    dw_->upload(w.data(), w.size() * 4);
    DeviceBuffer dh(x.size() * 4), want(bytes_);
    want.fill(0xA5);
    cuda::clear_launch_failure();
    ASSERT_TRUE(cuda::rms_norm(dx_->as<float>(), dw_->as<float>(), dh.as<float>(), k, n, kEps, "rms_norm", stream_));
    ASSERT_TRUE(cuda::quantize_activations(type, dh.as<float>(), k, n, want.get(), stream_));
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    want_.assign(bytes_, 0);
    want.download(want_.data(), bytes_);
  }

  /// The fused launch's bytes on the uploaded x, w (poisoned buffer; parts 0: the plan's split)
  /// against want_: success, or where the first byte differs.
  ::testing::AssertionResult fused_matches_chain(TensorType type, int64_t k, int64_t n, int64_t parts) {
    DeviceBuffer got(bytes_);
    got.fill(0xA5);
    const bool launched =
        parts == 0 ? cuda::rms_norm_quantize(type, dx_->as<float>(), dw_->as<float>(), k, n, kEps, got.get(), stream_)
                   : cuda::rms_norm_quantize_split(type, dx_->as<float>(), dw_->as<float>(), k, n, kEps, got.get(),
                                                   parts, stream_);
    if (!launched) return ::testing::AssertionFailure() << "the fused launch failed";
    if (cudaStreamSynchronize(stream_) != cudaSuccess) return ::testing::AssertionFailure() << "the stream failed";
    std::vector<uint8_t> b(bytes_);
    got.download(b.data(), bytes_);
    size_t diffs = 0, first = bytes_;
    for (size_t i = 0; i < bytes_; ++i)
      if (want_[i] != b[i] && diffs++ == 0) first = i;
    if (diffs == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << diffs << " bytes differ; first at byte " << first << " of " << bytes_
                                         << ": fused " << static_cast<int>(b[first]) << ", chain "
                                         << static_cast<int>(want_[first])
                                         << " (planes: qs at 0, d/ds and bsums after k * n rounded up to 256)";
  }

  size_t bytes_ = 0;
  std::unique_ptr<DeviceBuffer> dx_, dw_;
  std::vector<uint8_t> want_;
};

TEST_P(CudaNormQuantize, one_launch_writes_the_bytes_of_rms_norm_then_quantize) {
  const auto [type, k] = GetParam();
  for (int64_t n : {1, 2, 3, 8}) {
    SCOPED_TRACE(std::string(type_name(type)) + " k " + std::to_string(k) + " n " + std::to_string(n));
    ASSERT_NO_FATAL_FAILURE(run_chain(type, k, n, edge_rows(k, n), test::random_acts(k, 1, 710)));
    EXPECT_TRUE(fused_matches_chain(type, k, n, 0));
  }
}

TEST_P(CudaNormQuantize, every_split_of_a_row_over_blocks_writes_the_same_bytes) {
  const auto [type, k] = GetParam();
  for (int64_t n : {1, 3}) {
    const cuda::NormQuantizePlan p = cuda::norm_quantize_plan(type, k, n);
    ASSERT_GE(p.max_parts, 1);
    ASSERT_NO_FATAL_FAILURE(run_chain(type, k, n, edge_rows(k, n), test::random_acts(k, 1, 711)));
    for (int64_t parts = p.min_parts; parts <= p.max_parts; ++parts)
      EXPECT_TRUE(fused_matches_chain(type, k, n, parts))
          << type_name(type) << " k " << k << " n " << n << ": " << parts << " blocks per row of " << p.units
          << " units";
  }
}

INSTANTIATE_TEST_SUITE_P(Rows, CudaNormQuantize,
                         // Q8: at most 4 / 6 / 14 / 15 / 19 / 44 / 74 blocks per row; 896 and 3616 (28, 113
                         // blocks) split unevenly; 4864 and up need 2 or more blocks per row.
                         // Q8K: 1 / 6 / 14 / 20 / 33 super-blocks; 8448 needs 2 blocks per row.
                         ::testing::Values(Case{TensorType::Q8_0, 896}, Case{TensorType::Q4_1, 1536},
                                           Case{TensorType::Q4_0, 3584}, Case{TensorType::Q5_0, 3616},
                                           Case{TensorType::Q8_0, 4864}, Case{TensorType::Q8_0, 11264},
                                           Case{TensorType::Q4_0, 18944}, Case{TensorType::Q4_K, 256},
                                           Case{TensorType::Q4_K, 1536}, Case{TensorType::Q6_K, 3584},
                                           Case{TensorType::Q5_K, 5120}, Case{TensorType::Q4_K, 8448}),
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
  const cuda::NormQuantizePlan p = cuda::norm_quantize_plan(TensorType::Q4_K, 1536, 1);
  ASSERT_EQ(p.max_parts, 6);
  for (const int64_t parts : {p.min_parts - 1, p.max_parts + 1}) {
    cuda::clear_launch_failure();
    EXPECT_FALSE(cuda::rms_norm_quantize_split(TensorType::Q4_K, dx.as<float>(), dw.as<float>(), 1536, 1, kEps,
                                               dq.get(), parts, nullptr))
        << parts << " blocks per row";
    ASSERT_NE(cuda::launch_failure(), nullptr);
    EXPECT_STREQ(cuda::launch_failure()->site, "rms_norm_quantize_bad_args");
  }
  cuda::clear_launch_failure();
  EXPECT_FALSE(cuda::rms_norm_quantize(TensorType::Q4_K, dx.as<float>(), dw.as<float>(), 1536, 0, kEps, dq.get(),
                                       nullptr))
      << "no token rows";
  cuda::clear_launch_failure();
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
