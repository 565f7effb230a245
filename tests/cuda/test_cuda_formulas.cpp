// The device kernels' element formulas, evaluated on the host (the same __host__ __device__
// code the kernels run: dequant.cuh, the KV store steps), against the CPU reference, bit for
// bit. These run without a device; the device tests then check that the device evaluates them
// the same way (CudaGetRows, CudaKv).
#ifdef MINFER_HAS_CUDA

#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/fp16.h"
#include "cuda/kernels/get_rows.cuh"
#include "cuda/kernels/kv.cuh"
#include "cuda_test_util.h"
#include "quant/quant.h"

namespace minfer {
namespace {

using test::random_floats;

class CudaFormulas : public ::testing::TestWithParam<TensorType> {};

/// A row of `type` whose blocks are random bytes, with every half-precision scale field set to
/// a finite value (random bits elsewhere reach every nibble, sign and 6-bit scale pattern).
std::vector<uint8_t> random_blocks(TensorType type, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(row_bytes(type, n));
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  const TypeTraits& t = type_traits(type);
  if (!t.quantized) {
    if (type == TensorType::F32)  // finite floats
      for (size_t i = 0; i + 4 <= b.size(); i += 4) {
        const float f = std::normal_distribution<float>(0.0f, 10.0f)(rng);
        std::memcpy(b.data() + i, &f, 4);
      }
    return b;
  }
  std::normal_distribution<float> d(0.0f, 0.01f);
  const auto put_half = [&](size_t off) {
    const uint16_t h = fp32_to_fp16(d(rng));
    std::memcpy(b.data() + off, &h, 2);
  };
  for (size_t blk = 0; blk < b.size(); blk += t.block_bytes) {
    switch (type) {
      case TensorType::Q4_0: case TensorType::Q5_0: case TensorType::Q8_0: put_half(blk); break;
      case TensorType::Q4_1: case TensorType::Q5_1: case TensorType::Q4_K: case TensorType::Q5_K:
        put_half(blk);
        put_half(blk + 2);
        break;
      case TensorType::Q6_K: put_half(blk + 208); break;
      default: break;
    }
  }
  return b;
}

TEST_P(CudaFormulas, DequantizationFormulasAreTheCpusBitForBit) {
  const TensorType type = GetParam();
  const int64_t n = 1024;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    // Random blocks, and rows the reference quantizer wrote.
    std::vector<uint8_t> rows[2] = {random_blocks(type, n, seed), std::vector<uint8_t>(row_bytes(type, n))};
    const auto v = random_floats(static_cast<size_t>(n), seed, 0.5f);
    type_traits(type).quantize_row(v.data(), rows[1].data(), n);
    for (const auto& row : rows) {
      std::vector<float> got(static_cast<size_t>(n)), want(static_cast<size_t>(n));
      ASSERT_TRUE(cuda::dequantize_row_on_host(type, row.data(), n, got.data()));
      type_traits(type).dequantize_row(row.data(), want.data(), n);
      ASSERT_TRUE(test::bytes_equal(test::as_bytes(got), test::as_bytes(want))) << type_name(type) << " seed " << seed;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryWeightType, CudaFormulas,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q4_0,
                                           TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                                           TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K),
                         [](const auto& param_info) { return std::string(type_name(param_info.param)); });

TEST(CudaFormulas, HalfWideningIsExactForEveryHalf) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> got(65536);
  ASSERT_TRUE(cuda::dequantize_row_on_host(TensorType::F16, all.data(), 65536, got.data()));
  for (uint32_t i = 0; i < 65536; ++i) {
    const float want = fp16_to_fp32(static_cast<uint16_t>(i));
    ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << "half 0x" << std::hex << i;
  }
}

TEST(CudaFormulas, HalfRoundingGivesTheCpusBitsForEveryHalfBoundaryAndRandomFloats) {
  // Every half value, the midpoints between neighbours (ties), one float either side of them,
  // and random bit patterns (NaN and infinities included).
  std::vector<float> xs;
  for (uint32_t h = 0; h < 0x7C00; ++h) {
    const float a = fp16_to_fp32(static_cast<uint16_t>(h)), b = fp16_to_fp32(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
    for (float v : {a, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      xs.push_back(v);
      xs.push_back(-v);
    }
  }
  std::mt19937 rng(9);
  for (int i = 0; i < (1 << 20); ++i) {
    const uint32_t bits = rng();
    float f;
    std::memcpy(&f, &bits, 4);
    xs.push_back(f);
  }
  std::vector<uint16_t> got(xs.size());
  ASSERT_TRUE(cuda::kv_quantize_row_on_host(TensorType::F16, xs.data(), static_cast<int64_t>(xs.size()), got.data()));
  for (size_t i = 0; i < xs.size(); ++i)
    ASSERT_EQ(got[i], fp32_to_fp16(xs[i])) << "float " << xs[i] << " (index " << i << ")";
}

TEST(CudaFormulas, KvQ8_0StoreStepsGiveTheCpusBytes) {
  std::vector<float> x = random_floats(32 * 64, 17, 3.0f);
  const float ties[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, -126.5f, 1.5f, 100.49999f};
  for (size_t j = 0; j < std::size(ties); ++j) x[32 + j] = ties[j];          // block 1: d = 1
  for (int j = 0; j < 32; ++j) x[64 + j] = 0.0f;                             // block 2: d = 0
  for (int j = 0; j < 32; ++j) x[96 + j] = 1e-6f * static_cast<float>(j - 16);  // block 3: tiny d
  for (int j = 0; j < 32; ++j) x[128 + j] = 3e4f * static_cast<float>(j % 7 - 3);  // block 4: large
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> got(row_bytes(TensorType::Q8_0, n)), want(got.size());
  ASSERT_TRUE(cuda::kv_quantize_row_on_host(TensorType::Q8_0, x.data(), n, got.data()));
  type_traits(TensorType::Q8_0).quantize_row(x.data(), want.data(), n);
  EXPECT_TRUE(test::bytes_equal(got, want, false));
}

}  // namespace
}  // namespace minfer

#endif  // MINFER_HAS_CUDA
