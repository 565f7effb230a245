// The quant registry (find_type_traits, type_traits, row_bytes) and the errors of the row kernels
// on bad input: row lengths, non-finite values, scales beyond the half-precision range.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/quant.h"

namespace minfer {
namespace {

/// Runs `fn`, expects a minfer::Error, and returns its message ("" and a failure otherwise).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no minfer::Error thrown";
  return "";
}

TEST(QuantRegistry, GeometryMatchesGgmlLayouts) {
  struct Expect {
    TensorType type;
    int64_t block;
    size_t bytes;
    TensorType vec_dot;
  };
  // ggml-common.h block sizes; vec_dot types as in the fixture README.
  const Expect table[] = {
      {TensorType::F32, 1, 4, TensorType::F32},       {TensorType::F16, 1, 2, TensorType::F16},
      {TensorType::BF16, 1, 2, TensorType::BF16},     {TensorType::Q4_0, 32, 18, TensorType::Q8_0},
      {TensorType::Q4_1, 32, 20, TensorType::Q8_1},   {TensorType::Q5_0, 32, 22, TensorType::Q8_0},
      {TensorType::Q5_1, 32, 24, TensorType::Q8_1},   {TensorType::Q8_0, 32, 34, TensorType::Q8_0},
      {TensorType::Q8_1, 32, 36, TensorType::Q8_1},   {TensorType::Q4_K, 256, 144, TensorType::Q8_K},
      {TensorType::Q5_K, 256, 176, TensorType::Q8_K}, {TensorType::Q6_K, 256, 210, TensorType::Q8_K},
      {TensorType::Q8_K, 256, 292, TensorType::Q8_K},
  };
  for (const auto& e : table) {
    const TypeTraits* t = find_type_traits(e.type);
    ASSERT_NE(t, nullptr) << type_name(e.type);
    EXPECT_EQ(t->type, e.type);
    EXPECT_EQ(t->block_size, e.block) << type_name(e.type);
    EXPECT_EQ(t->block_bytes, e.bytes) << type_name(e.type);
    EXPECT_EQ(t->vec_dot_type, e.vec_dot) << type_name(e.type);
    EXPECT_EQ(t->quantized, e.block > 1) << type_name(e.type);
    EXPECT_NE(t->dequantize_row, nullptr);
    EXPECT_NE(t->quantize_row, nullptr);
    const bool activation_only = e.type == TensorType::Q8_1 || e.type == TensorType::Q8_K;
    EXPECT_EQ(t->vec_dot == nullptr, activation_only) << type_name(e.type);
  }
}

TEST(QuantRegistry, UnsupportedTypesAreAbsentAndNamedInTheError) {
  for (TensorType t : {TensorType::Q2_K, TensorType::Q3_K, TensorType::IQ4_XS, TensorType::I32}) {
    EXPECT_EQ(find_type_traits(t), nullptr) << type_name(t);
    EXPECT_EQ(error_of([&] { type_traits(t); }),
              "tensor type " + std::string(type_name(t)) + " is not supported");
  }
}

TEST(QuantRowBytes, CountsWholeBlocks) {
  EXPECT_EQ(row_bytes(TensorType::F32, 4096), 16384u);
  EXPECT_EQ(row_bytes(TensorType::BF16, 3), 6u);
  EXPECT_EQ(row_bytes(TensorType::Q4_0, 4096), 128u * 18u);
  EXPECT_EQ(row_bytes(TensorType::Q4_K, 4096), 16u * 144u);
  EXPECT_EQ(row_bytes(TensorType::Q6_K, 0), 0u);
}

TEST(QuantRowBytes, RejectsLengthsThatAreNotWholeBlocks) {
  EXPECT_EQ(error_of([] { row_bytes(TensorType::Q4_0, 100); }),
            "row of 100 elements of type q4_0: not a multiple of the block size 32");
  EXPECT_EQ(error_of([] { row_bytes(TensorType::Q4_K, 4000); }),
            "row of 4000 elements of type q4_K: not a multiple of the block size 256");
  EXPECT_EQ(error_of([] { row_bytes(TensorType::F16, -2); }),
            "row of -2 elements of type f16: the length is negative");
  EXPECT_EQ(error_of([] { row_bytes(TensorType::Q2_K, 256); }), "tensor type q2_K is not supported");
}

TEST(QuantRowBytes, RejectsRowsWhoseByteCountOverflows) {
  // With a 64-bit size_t only F32 (4 bytes per element) can overflow: 2^63 - 1 elements.
  const int64_t max = std::numeric_limits<int64_t>::max();
  const std::string msg = error_of([&] { row_bytes(TensorType::F32, max); });
  EXPECT_NE(msg.find("row of 9223372036854775807 elements of type f32"), std::string::npos) << msg;
  EXPECT_NE(msg.find("overflow size_t"), std::string::npos) << msg;
  // The largest F32 row that fits: (2^62 - 1) * 4 = 2^64 - 4 bytes.
  EXPECT_EQ(row_bytes(TensorType::F32, max / 2), std::numeric_limits<size_t>::max() - 3);
  // The largest whole-block Q8_K row: (2^55 - 1) blocks * 292 bytes < 2^64.
  EXPECT_EQ(row_bytes(TensorType::Q8_K, (max / 256) * 256), ((size_t{1} << 55) - 1) * 292u);
}

TEST(QuantRowKernels, RejectRowLengthsThatAreNotWholeBlocks) {
  std::vector<float> f(1024, 1.0f);
  std::vector<uint8_t> packed(4096);
  for (TensorType type : {TensorType::Q4_0, TensorType::Q8_1, TensorType::Q4_K, TensorType::Q8_K}) {
    const TypeTraits& t = type_traits(type);
    const int64_t bad = t.block_size + 1;
    const std::string tail = ": row length " + std::to_string(bad) +
                             " is not a multiple of the block size " +
                             std::to_string(t.block_size);
    const std::string name(type_name(type));
    EXPECT_EQ(error_of([&] { t.quantize_row(f.data(), packed.data(), bad); }),
              "quantize " + name + tail);
    EXPECT_EQ(error_of([&] { t.dequantize_row(packed.data(), f.data(), bad); }),
              "dequantize " + name + tail);
    if (t.vec_dot) {
      EXPECT_EQ(error_of([&] { t.vec_dot(bad, packed.data(), packed.data()); }),
                "vec_dot " + name + tail);
    }
  }
  EXPECT_EQ(error_of([&] { type_traits(TensorType::F32).vec_dot(-1, f.data(), f.data()); }),
            "vec_dot f32: row length -1 is negative");
}

TEST(QuantRowKernels, QuantizersRejectNonFiniteValuesNamingTheElement) {
  std::vector<uint8_t> packed(4096);
  for (TensorType type : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                          TensorType::Q8_0, TensorType::Q8_1, TensorType::Q4_K, TensorType::Q5_K,
                          TensorType::Q6_K, TensorType::Q8_K}) {
    std::vector<float> x(512, 0.5f);
    x[300] = std::numeric_limits<float>::quiet_NaN();
    const std::string name(type_name(type));
    EXPECT_EQ(error_of([&] { type_traits(type).quantize_row(x.data(), packed.data(), 512); }),
              "quantize " + name + ": element 300 of the row is not finite (nan)");
    x[300] = -std::numeric_limits<float>::infinity();
    EXPECT_EQ(error_of([&] { type_traits(type).quantize_row(x.data(), packed.data(), 512); }),
              "quantize " + name + ": element 300 of the row is not finite (-inf)");
  }
}

TEST(QuantRowKernels, QuantizersRejectScalesBeyondTheHalfRange) {
  std::vector<uint8_t> packed(4096);
  std::vector<float> x(256, 0.5f);
  x[40] = 1e9f;  // block 1 of the 32-element types, block 0 of the K-quants
  EXPECT_EQ(error_of([&] { type_traits(TensorType::Q4_0).quantize_row(x.data(), packed.data(), 256); }),
            "quantize q4_0: block 1 needs d = -1.25e+08, beyond the half-precision range (65504)");
  EXPECT_EQ(error_of([&] { type_traits(TensorType::Q8_0).quantize_row(x.data(), packed.data(), 256); }),
            "quantize q8_0: block 1 needs d = 7.87402e+06, beyond the half-precision range (65504)");
  for (TensorType type : {TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_1,
                          TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    const std::string msg =
        error_of([&] { type_traits(type).quantize_row(x.data(), packed.data(), 256); });
    EXPECT_NE(msg.find("beyond the half-precision range"), std::string::npos) << msg;
    EXPECT_NE(msg.find(std::string("quantize ") + std::string(type_name(type)) + ": block "),
              std::string::npos)
        << msg;
  }
  // Q8_K's scale is an f32: the same row quantizes, and 1e9 comes back within a step.
  type_traits(TensorType::Q8_K).quantize_row(x.data(), packed.data(), 256);
  std::vector<float> back(256);
  type_traits(TensorType::Q8_K).dequantize_row(packed.data(), back.data(), 256);
  EXPECT_NEAR(back[40], 1e9, 1e9 / 254);
}

TEST(QuantRowKernels, FloatTypesConvertNonFiniteValues) {
  const float in[4] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       1e6f, -0.0f};
  for (TensorType type : {TensorType::F16, TensorType::BF16}) {
    const TypeTraits& t = type_traits(type);
    uint16_t packed[4];
    float back[4];
    t.quantize_row(in, packed, 4);
    t.dequantize_row(packed, back, 4);
    EXPECT_TRUE(std::isnan(back[0])) << type_name(type);
    EXPECT_EQ(back[1], std::numeric_limits<float>::infinity()) << type_name(type);
    EXPECT_TRUE(std::signbit(back[3]) && back[3] == 0.0f) << type_name(type);
  }
  float back[4];
  uint16_t packed[4];
  type_traits(TensorType::F16).quantize_row(in, packed, 4);
  type_traits(TensorType::F16).dequantize_row(packed, back, 4);
  EXPECT_EQ(back[2], std::numeric_limits<float>::infinity());  // 1e6 overflows half: IEEE inf
  type_traits(TensorType::BF16).quantize_row(in, packed, 4);
  type_traits(TensorType::BF16).dequantize_row(packed, back, 4);
  EXPECT_EQ(back[2], 999424.0f);  // 1e6 rounded to 8 significant bits
}

TEST(QuantBlocks, K4ScalePackingRoundTripsEveryValue) {
  uint8_t sc[8], m[8], packed[12];
  for (int v = 0; v < 64; ++v) {
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>((v + 7 * j) % 64);
      m[j] = static_cast<uint8_t>((63 - v + 5 * j) % 64);
    }
    k4_pack_scale_min(sc, m, packed);
    for (int j = 0; j < 8; ++j) {
      uint8_t s2, m2;
      k4_scale_min(j, packed, &s2, &m2);
      ASSERT_EQ(s2, sc[j]) << "v " << v << " j " << j;
      ASSERT_EQ(m2, m[j]) << "v " << v << " j " << j;
    }
  }
}

TEST(QuantBlocks, KQuantLevelPackingRoundTrips) {
  uint8_t q[kQKK], back[kQKK];
  for (int e = 0; e < kQKK; ++e) q[e] = static_cast<uint8_t>((e * 37 + 11) % 64);
  block_q6_K b6{};
  pack_q6_K(q, &b6);
  unpack_q6_K(b6, back);
  for (int e = 0; e < kQKK; ++e) ASSERT_EQ(back[e], q[e]) << "q6_K element " << e;
  for (int e = 0; e < kQKK; ++e) q[e] &= 31;
  block_q5_K b5{};
  pack_q5_K(q, &b5);
  unpack_q5_K(b5, back);
  for (int e = 0; e < kQKK; ++e) ASSERT_EQ(back[e], q[e]) << "q5_K element " << e;
  for (int e = 0; e < kQKK; ++e) q[e] &= 15;
  block_q4_K b4{};
  pack_q4_K(q, &b4);
  unpack_q4_K(b4, back);
  for (int e = 0; e < kQKK; ++e) ASSERT_EQ(back[e], q[e]) << "q4_K element " << e;
}

}  // namespace
}  // namespace minfer
